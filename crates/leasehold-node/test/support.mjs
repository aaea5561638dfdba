// What the suites share: the stores to run on (test/run.mjs starts the
// servers), one test per store, unique names, child processes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { test, after } from 'node:test';
import { fileURLToPath } from 'node:url';

export const CI = process.env.CI === 'true';
export const BIN = process.env.LEASEHOLD_BIN;
export const here = path.dirname(fileURLToPath(import.meta.url));
export const packageDir = path.dirname(here);

/** A temp dir of this suite's, removed at its end. */
export function tempDir(prefix = 'leasehold-node-') {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const dir = tempDir();

/** Every store: `{ kind, url }`, or `{ kind, missing }` with why not. */
export function stores() {
  const started = process.env.LEASEHOLD_TEST_STORES;
  const servers = started
    ? JSON.parse(started)
    : Object.fromEntries(
        ['postgres', 'etcd', 'redis', 'firestore'].map((k) => [
          k,
          { missing: 'the servers are started by test/run.mjs (scripts/test runs it); this suite ran without it' },
        ]),
      );
  const list = [{ kind: 'sqlite', url: `sqlite://${path.join(dir, 'store.db')}` }];
  for (const [kind, s] of Object.entries(servers)) {
    for (const [k, v] of Object.entries(s.env ?? {})) process.env[k] = v;
    list.push({ kind, ...s });
  }
  return list;
}

/**
 * `body(t, store)` as one test per store, named `title [kind]`. A store
 * that cannot be started here skips its test with the reason — a failure
 * under CI=true, never a pass.
 */
export function eachStore(title, body, { kinds } = {}) {
  for (const s of stores()) {
    if (kinds && !kinds.includes(s.kind)) continue;
    test(`${title} [${s.kind}]`, { timeout: TEST_TIMEOUT }, async (t) => {
      if (s.missing) {
        if (CI) assert.fail(`CI=true, and this test cannot run here: ${s.missing}`);
        t.skip(s.missing);
        return;
      }
      const { Store } = await import('../index.js');
      const store = new Store(s.url);
      try {
        await body(t, store, s);
      } finally {
        store.close();
      }
    });
  }
}

/** How long a test may run before it fails (a hang must not stall the suite). */
export const TEST_TIMEOUT = 120_000;

let n = 0;
/** A name no other test (nor another run) uses. */
export function unique(prefix = 't') {
  n += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${n}`;
}

/** A child process with its stdout read line by line: `line()` is the next one. */
export function child(argv, options = {}) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'], ...options });
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  proc.line = async () => {
    const { value, done } = await lines.next();
    if (done) throw new Error(`${argv.join(' ')} ended without a line (exit ${proc.exitCode})`);
    return value;
  };
  proc.ended = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  after(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
  return proc;
}

/** A Node.js program (its source) run as a child process with the package importable as 'leasehold'. */
export function nodeChild(source, args = [], options = {}) {
  const entry = path.join(packageDir, 'index.mjs');
  const program = source.replaceAll("from 'leasehold'", `from ${JSON.stringify(entry)}`);
  return child([process.execPath, '--input-type=module', '-e', program, '--', ...args], options);
}

/** Another process holding the SQLite store's write lock until killed (renewals fail meanwhile). */
export async function blockSqlite(file) {
  const blocker = child(['sqlite3', file]);
  blocker.stdin.write('BEGIN IMMEDIATE;\n.print locked\n');
  assert.equal(await blocker.line(), 'locked');
  return blocker;
}

/** Resolves after `ms`. */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `f()` is truthy (polling), up to `limit` ms. */
export async function waitFor(f, limit = 10_000) {
  const deadline = Date.now() + limit;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${f}`);
    await sleep(20);
  }
}

/**
 * The checker of "never two at once": every pair of `intervals` (each
 * `{ start, end, who }`, as the processes under test logged them) that
 * overlap. Intervals that only touch (one's end is the other's start)
 * do not. Shares nothing with what it checks.
 */
export function overlapping(intervals) {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const found = [];
  for (let i = 0; i < sorted.length; i += 1) {
    for (let j = i + 1; j < sorted.length && sorted[j].start < sorted[i].end; j += 1) {
      found.push([sorted[i], sorted[j]]);
    }
  }
  return found;
}

/** Whether a process (or, for a negative pid, a process group) exists. */
export function exists(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    if (e.code === 'ESRCH') return false;
    throw e;
  }
}

/** How `promise` settled within `limit` ms: `{ value }`, `{ error }`, or `{ pending: true }` — so a test of an abort fails rather than hangs when the abort does nothing. */
export function settledWithin(promise, limit) {
  return Promise.race([
    promise.then(
      (value) => ({ value }),
      (error) => ({ error }),
    ),
    sleep(limit).then(() => ({ pending: true })),
  ]);
}
