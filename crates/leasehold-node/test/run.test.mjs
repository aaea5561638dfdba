// store.run: a command under a lease. What must never happen: a command
// (or a process it started) alive after its lease passed on, two commands
// under one name at once, an AbortSignal that does not end a wait or stop
// a command, a command left running by a Worker that ended, a run that
// blocks the event loop. Bad input is refused before anything runs.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import path from 'node:path';
import { test } from 'node:test';
import * as lh from '../index.mjs';
import {
  eachStore,
  unique,
  nodeChild,
  blockSqlite,
  waitFor,
  tempDir,
  sleep,
  overlapping,
  exists,
  packageDir,
  settledWithin,
} from './support.mjs';

/** The pid a command wrote to `file`, once it has. */
async function pidIn(file) {
  return Number(await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').trim()));
}

eachStore('a command runs with its grant in the environment; its code, signal and output come back', async (t, store) => {
  const name = unique('run');
  const dir = tempDir();
  const script = 'printf "%s %s %s" "$LEASEHOLD_NAME" "$LEASEHOLD_TOKEN" "$EXTRA"; cat; pwd >&2; exit 3';
  const ran = await store.run(name, 'sh', ['-c', script], {
    ttl: '10s',
    env: { EXTRA: 'x y' },
    cwd: dir,
    input: 'from stdin',
    captureOutput: true,
  });
  const [leaseName, token, extra] = ran.stdout.toString().split(' ', 3);
  assert.equal(leaseName, name);
  assert.equal(ran.stdout.toString(), `${name} ${token} x yfrom stdin`);
  assert.equal(ran.stderr.toString().trim(), dir);
  assert.deepEqual([ran.code, ran.signal, extra], [3, null, 'x']);
  const state = await store.status(name);
  assert.deepEqual(state.grants, [], 'released once the command ended');
  assert.equal(state.last_token, Number(token), 'the command was told its own grant');

  // Death by a signal is told apart from an exit with its number.
  assert.deepEqual(await store.run(name, 'sh', ['-c', 'kill -TERM $$']), { code: 143, signal: 'SIGTERM', stdout: null, stderr: null });
  assert.deepEqual((await store.run(name, 'sh', ['-c', 'exit 143'])).signal, null);
});

eachStore('two processes racing store.run on one name never run their commands at once', async (t, store, s) => {
  const name = unique('race');
  const log = path.join(tempDir(), 'log');
  writeFileSync(log, '');
  // Each run appends its start and end (ns, this host's clock) and its pid.
  const command = 'echo "start $(date +%s%N) $$" >> "$0"; sleep 0.05; echo "end $(date +%s%N) $$" >> "$0"';
  const runs = 4;
  const racers = [0, 1].map(() =>
    nodeChild(
      `import { Store } from 'leasehold';
       const [url, name, log, runs, command] = process.argv.slice(1);
       const store = new Store(url);
       const codes = [];
       for (let i = 0; i < Number(runs); i += 1) {
         codes.push((await store.run(name, 'sh', ['-c', command, log], { ttl: '10s', wait: '60s' })).code);
       }
       console.log(JSON.stringify(codes));
       store.close();`,
      [s.url, name, log, String(runs), command],
    ),
  );
  for (const racer of racers) assert.deepEqual(JSON.parse(await racer.line()), Array(runs).fill(0));
  const events = readFileSync(log, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const base = BigInt(events[0][1]);
  const byPid = new Map();
  for (const [what, ns, pid] of events) {
    const at = Number(BigInt(ns) - base);
    byPid.set(pid, { ...byPid.get(pid), [what]: at, who: pid });
  }
  const intervals = [...byPid.values()];
  assert.equal(intervals.length, 2 * runs, 'every run ran once');
  assert.ok(intervals.every((i) => i.start !== undefined && i.end !== undefined), 'every run ran to its end');
  assert.deepEqual(overlapping(intervals), [], 'two commands ran under one name at once');
});

test('a command is gone before its lost lease can pass on to a newcomer', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'r.db');
  const store = lh.Store.sqlite(file);
  const pidFile = path.join(dir, 'pid');
  const running = store
    .run('r', 'sh', ['-c', 'echo $$ > "$0"; exec sleep 60', pidFile], { ttl: '2s' })
    .then(() => assert.fail('ran to its end'), (e) => e);
  const pid = await pidIn(pidFile);
  // Renewals fail from now on; the grant expires by the store's clock
  // after its TTL.
  const blocker = await blockSqlite(file);
  await sleep(2500);
  blocker.kill('SIGKILL');
  await blocker.ended;
  // The newcomer looks for the command's process group as soon as it
  // holds the lease.
  const newcomer = nodeChild(
    `import { Store } from 'leasehold';
     const lease = await Store.sqlite(process.argv[1]).acquire('r', { wait: '20s' });
     let alive = true;
     try { process.kill(-Number(process.argv[2]), 0); } catch (e) { alive = e.code !== 'ESRCH'; }
     console.log(JSON.stringify({ token: lease.token, alive }));
     await lease.release();`,
    [file, String(pid)],
  );
  const seen = JSON.parse(await newcomer.line());
  assert.equal(seen.alive, false, "the command's process group was alive when the newcomer got the lease");
  const e = await running;
  assert.ok(e instanceof lh.LeaseLost, String(e));
  assert.match(e.message, /^lost the lease r \(token 1\) while the command ran: .* The command was stopped/);
  assert.ok(seen.token > 1);
  store.close();
});

eachStore('an AbortSignal ends a wait for the lease: out of the queue, nothing run', async (t, store) => {
  const name = unique('abort-wait');
  const marker = path.join(tempDir(), 'ran');
  const holder = await store.acquire(name, { ttl: '30s' });
  const controller = new AbortController();
  const waiting = store.run(name, 'touch', [marker], { wait: true, signal: controller.signal });
  await waitFor(async () => (await store.status(name)).waiters === 1);
  controller.abort();
  const { error } = await settledWithin(waiting, 10_000);
  assert.equal(error?.name, 'AbortError', 'the abort did not end the wait');
  assert.equal((await store.status(name)).waiters, 0, 'the wait left the queue');
  await holder.release();
  await assert.rejects(store.run(name, 'touch', [marker], { signal: controller.signal }), { name: 'AbortError' });
  assert.equal(existsSync(marker), false, 'nothing ran');
});

eachStore(
  'an AbortSignal stops a running command and every process it started, then releases',
  async (t, store) => {
    const name = unique('abort-run');
    const dir = tempDir();
    const [pidFile, escapedFile] = [path.join(dir, 'pid'), path.join(dir, 'escaped')];
    // SIGTERM ignored (the grace period's SIGKILL ends it); a child that
    // left the command's process group.
    const script = 'trap "" TERM; setsid sleep 60 & echo $! > "$1"; echo $$ > "$0"; wait';
    const controller = new AbortController();
    const running = store.run(name, 'sh', ['-c', script, pidFile, escapedFile], {
      grace: 500,
      signal: controller.signal,
    });
    const [pid, escaped] = [await pidIn(pidFile), await pidIn(escapedFile)];
    const reason = new Error('enough');
    controller.abort(reason);
    const { error } = await settledWithin(running, 10_000);
    assert.equal(error, reason, 'the abort did not stop the command (or rejected with something else)');
    assert.equal(exists(-pid), false, 'the command’s group lives on');
    assert.equal(exists(escaped), false, 'what the command started lives on');
    assert.deepEqual((await store.status(name)).grants, [], 'released');
  },
  { kinds: ['sqlite', 'postgres', 'redis'] },
);

test('a timeout stops the command (RunTimeout); a stall stops it (Stalled); a missing program is Failed', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 't.db'));
  const pidFile = path.join(tempDir(), 'pid');
  const timedOut = await store
    .run('t', 'sh', ['-c', 'echo $$ > "$0"; echo partial; exec sleep 60', pidFile], { timeout: 300, captureOutput: true })
    .then(() => assert.fail('ran to its end'), (e) => e);
  assert.ok(timedOut instanceof lh.RunTimeout && timedOut instanceof lh.Failed, String(timedOut));
  assert.equal(timedOut.code, 'LEASEHOLD_RUN_TIMEOUT');
  assert.equal(timedOut.timeout, 300);
  assert.equal(timedOut.stdout.toString(), 'partial\n');
  assert.match(timedOut.message, /^sh ran past its timeout of 300ms: it was stopped/);
  assert.equal(exists(-(await pidIn(pidFile))), false);

  const stalled = await store
    .run('t', 'sleep', ['60'], { stallTimeout: 300 })
    .then(() => assert.fail('ran to its end'), (e) => e);
  assert.ok(stalled instanceof lh.Stalled && stalled instanceof lh.Failed, String(stalled));
  assert.match(stalled.message, /^the command stalled: it wrote nothing to stdout or stderr for 300ms/);

  const missing = await store
    .run('t', 'no-such-program-here', [])
    .then(() => assert.fail('ran'), (e) => e);
  assert.ok(missing instanceof lh.Failed, String(missing));
  assert.match(missing.message, /no-such-program-here/);
  assert.deepEqual((await store.status('t')).grants, [], 'released every time');
  store.close();
});

test('a Worker that ends while its command runs leaves neither the command nor the lease', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'w.db');
  const pidFile = path.join(dir, 'pid');
  const worker = new Worker(
    `const { workerData } = require('node:worker_threads');
     const { Store } = require(workerData.entry);
     Store.sqlite(workerData.file).run('w', 'sh', ['-c', 'echo $$ > "$0"; exec sleep 60', workerData.pidFile], { ttl: '1h', grace: 500 })
       .catch(() => {});`,
    { eval: true, workerData: { entry: path.join(packageDir, 'index.js'), file, pidFile } },
  );
  const pid = await pidIn(pidFile);
  const store = lh.Store.sqlite(file);
  assert.equal((await store.status('w')).grants.length, 1);
  await worker.terminate();
  await waitFor(() => !exists(-pid), 5000);
  // Same process, and a TTL of an hour: only the stop at the Worker's end
  // can have released it.
  await waitFor(async () => (await store.status('w')).grants.length === 0, 5000);
  store.close();
});

test('the event loop runs while a command does', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 'l.db'));
  let ticks = 0;
  const timer = setInterval(() => {
    ticks += 1;
  }, 10);
  await store.run('l', 'sleep', ['1']);
  clearInterval(timer);
  assert.ok(ticks >= 20, `${ticks} ticks in a second`);
  store.close();
});

test('the guard: $LEASEHOLD_GUARD when set, else beside the addon', async () => {
  const file = path.join(tempDir(), 'g.db');
  const program = `import { Store } from 'leasehold';
     Store.sqlite(process.argv[1]).run('g', 'true').then(
       (r) => console.log('code', r.code),
       (e) => console.log(e.name, e.message));`;
  const given = nodeChild(program, [file], { env: { ...process.env, LEASEHOLD_GUARD: '/nonexistent/guard' } });
  assert.match(await given.line(), /^Failed .*\$LEASEHOLD_GUARD is \/nonexistent\/guard, which is not an executable file/);
  const env = { ...process.env, PATH: '/usr/bin:/bin' };
  delete env.LEASEHOLD_GUARD;
  const beside = nodeChild(program, [file], { env });
  assert.equal(await beside.line(), 'code 0');
});

test('bad input is refused with InvalidInput, naming it, before anything runs', async () => {
  const dir = tempDir();
  const store = lh.Store.sqlite(path.join(dir, 'b.db'));
  const marker = path.join(dir, 'ran');
  const cases = [
    [['', []], /the command must be a program's name or path/],
    [[42, []], /the command must be/],
    [['touch', [marker, 7]], /argument 1 must be a string, not 7/],
    [['touch', 'x', {}], /the arguments must be an array of strings/],
    [['touch', [marker], { env: { A: 1 } }], /env\.A must be a string, not 1/],
    [['touch', [marker], { env: 'A=1' }], /env must be an object of strings/],
    [['touch', [marker], { env: { LEASEHOLD_TOKEN: '9' } }], /env sets LEASEHOLD_TOKEN, which run sets to the lease's grant/],
    [['touch', [marker], { env: { 'A=B': '1' } }], /cannot be an environment variable/],
    [['touch', [marker], { wiat: 5 }], /unknown option "wiat"/],
    [['touch', [marker], { input: 5 }], /input must be a string or a Buffer/],
    [['touch', [marker], { cwd: path.join(dir, 'missing') }], /cwd .*missing.*nothing was run/],
    [['touch', [marker], { ttl: '2s', grace: '2s' }], /leave no time to renew within \{ ttl: "2s" \}.*Raise \{ ttl \}, or lower \{ grace \}/],
    [['touch', [marker], { timeout: -1 }], /timeout: -1 ms is not a duration/],
    [['touch', [marker], { captureOutput: 'yes' }], /captureOutput must be a boolean/],
  ];
  for (const [args, message] of cases) {
    const e = await store.run('b', ...args).then(() => assert.fail(`ran with ${JSON.stringify(args)}`), (x) => x);
    assert.ok(e instanceof lh.InvalidInput, `${JSON.stringify(args)}: ${e}`);
    assert.match(e.message, message);
  }
  await assert.rejects(store.run('', 'true'), lh.InvalidName);
  assert.equal(existsSync(marker), false, 'nothing ran');
  assert.equal(await store.status('b'), null, 'nothing was granted');
  store.close();
});
