// State files and file locks as a Node.js program uses them. What must
// never happen: a stale holder's write landing after a newer token's; a
// torn file after a crash, or seen by a reader; an update lost to another;
// a file changed that was only locked; two exclusive holders of a lock; a
// lock wait outliving its AbortSignal; a planted symlink followed; a
// write that waits for ever for a lock this program holds; a lock left
// held by a Worker that ended.
import assert from 'node:assert/strict';
import {
  appendFileSync,
  chmodSync,
  existsSync,
  lstatSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import * as lh from '../index.mjs';
import { eachStore, nodeChild, sleep, tempDir, unique, waitFor } from './support.mjs';

/** What `promise` rejects with; fails if it resolves, or settles not within `ms` (a wait for ever). */
async function refusal(promise, ms = 10_000) {
  const late = Symbol('late');
  const outcome = await Promise.race([
    promise.then(
      (v) => assert.fail(`resolved with ${JSON.stringify(v)}`),
      (e) => e,
    ),
    sleep(ms).then(() => late),
  ]);
  assert.notEqual(outcome, late, `still pending after ${ms} ms`);
  return outcome;
}

/** Everything about a file a lock must not change (ns times from a bigint stat). */
function facts(file) {
  const s = statSync(file, { bigint: true });
  return { bytes: readFileSync(file), mode: s.mode, mtime: s.mtimeNs, ctime: s.ctimeNs, ino: s.ino, size: s.size };
}

eachStore("a stale holder's write never lands after a newer token's", async (t, store) => {
  const name = unique('fenced');
  const file = path.join(tempDir(), 'report.json');
  const old = await store.acquire(name, { ttl: '30s' });
  await lh.writeJson(file, { by: 'old' }, { fence: old });
  await old.release();
  const current = await store.acquire(name);
  assert.ok(current.token > old.token);
  await lh.writeJson(file, { by: 'current' }, { fence: current });
  const newer = readFileSync(file);
  const record = readFileSync(`${file}.fence`, 'utf8');
  assert.equal(record.trim(), `${current.token} ${current.grant} lease ${name}`, 'token, grant and lease recorded');

  let called = false;
  const stale = [
    () => lh.writeJson(file, { by: 'old again' }, { fence: old }),
    () => lh.writeFile(file, 'old again', { fence: old }),
    () => lh.writeFile(file, 'old again', { fence: old.token, fenceLease: name }),
    () => lh.writeFile(file, 'old again', { fence: { token: old.token, grant: old.grant } }),
    () => lh.updateJson(file, () => ((called = true), { by: 'old again' }), { fence: old }),
  ];
  for (const attempt of stale) {
    const e = await refusal(attempt());
    assert.ok(e instanceof lh.StaleToken && e.code === 'LEASEHOLD_STALE_TOKEN', String(e));
    assert.match(e.message, new RegExp(`stale fencing token ${old.token} for .*token ${current.token} of lease ${name} was already written`));
  }
  assert.equal(called, false, "a stale update's function is never called");
  // The same token from another grant (a store restored from a backup issues it again).
  const reissued = await refusal(lh.writeFile(file, 'x', { fence: { token: current.token, grant: '00000000000000ff' } }));
  assert.ok(reissued instanceof lh.StaleToken, String(reissued));
  assert.match(reissued.message, /issued twice/);
  assert.deepEqual(readFileSync(file), newer, 'the file is byte-identical to the newer write');
  assert.equal(readFileSync(`${file}.fence`, 'utf8'), record, 'the record never goes back');

  // The holder of the newest token writes on.
  const value = await lh.updateJson(file, (v) => ({ ...v, runs: 1 }), { fence: current });
  assert.deepEqual(value, { by: 'current', runs: 1 });
  assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), value);
  await current.release();
});

test('a token of another lease is refused whatever the tokens; fenceNewLease hands the file over', async () => {
  const file = path.join(tempDir(), 'owned.json');
  await lh.writeJson(file, 1, { fence: 5, fenceLease: 'nightly' });
  const e = await refusal(lh.writeJson(file, 2, { fence: 9, fenceLease: 'hourly' }));
  assert.ok(e instanceof lh.StaleToken, String(e));
  assert.match(e.message, /is fenced by lease nightly \(token 5 written\), not by lease hourly/);
  assert.match(e.message, /\{ fenceNewLease: true \}/);
  assert.doesNotMatch(e.message, /--fence-new-lease/);
  assert.equal(readFileSync(file, 'utf8'), '1\n');
  await lh.writeJson(file, 2, { fence: 1, fenceLease: 'hourly', fenceNewLease: true });
  assert.equal(readFileSync(`${file}.fence`, 'utf8').trim(), '1 lease hourly');
  assert.equal(readFileSync(file, 'utf8'), '2\n');
});

test('a writer killed with SIGKILL mid-write leaves one whole version; readers never see a torn file', async () => {
  const file = path.join(tempDir(), 'state.json');
  // Each version is large (many pages) and says what it must hold.
  const check = (text) => {
    const v = JSON.parse(text);
    assert.equal(v.pad, String(v.n % 10).repeat(v.size), `version ${v.n} is whole`);
    return v.n;
  };
  let n = 0;
  for (let round = 0; round < 3; round += 1) {
    const writer = nodeChild(
      `import { writeJson } from 'leasehold';
       for (let n = Number(process.argv[2]); ; n += 1) {
         const size = 200000 + (n % 7) * 40000;
         await writeJson(process.argv[1], { n, size, pad: String(n % 10).repeat(size) });
         console.log(n);
       }`,
      [file, String(n + 1)],
    );
    let last = Number(await writer.line());
    let reads = 0;
    for (; reads < 30; reads += 1) {
      check(readFileSync(file, 'utf8'));
      await sleep(3);
    }
    writer.kill('SIGKILL');
    for (;;) {
      try {
        last = Number(await writer.line());
      } catch {
        break;
      }
    }
    assert.equal((await writer.ended).signal, 'SIGKILL');
    n = check(readFileSync(file, 'utf8'));
    assert.ok(n === last || n === last + 1, `after the kill the file holds version ${n}; ${last} was written last`);
  }
});

test('concurrent updates from this process and another never lose one another', async () => {
  const file = path.join(tempDir(), 'count.json');
  const other = nodeChild(
    `import { updateJson } from 'leasehold';
     for (let i = 0; i < 40; i += 1) await updateJson(process.argv[1], (v) => ({ n: v.n + 1 }), { default: { n: 0 } });
     console.log('done');`,
    [file],
  );
  const mine = Array.from({ length: 40 }, () =>
    lh.updateJson(
      file,
      async (v) => {
        await sleep(1);
        v.n += 1;
        return v;
      },
      { default: { n: 0 } },
    ),
  );
  await Promise.all(mine);
  assert.equal(await other.line(), 'done');
  assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), { n: 80 });
});

test('an update whose function throws leaves the file as it was, and lets go of the lock', async () => {
  const file = path.join(tempDir(), 'keep.json');
  await lh.writeJson(file, { keep: true });
  const before = readFileSync(file);
  const boom = new Error('boom');
  assert.equal(await refusal(lh.updateJson(file, async () => Promise.reject(boom))), boom);
  const e = await refusal(lh.updateJson(file, () => undefined));
  assert.ok(e instanceof lh.InvalidInput && /returned undefined/.test(e.message), String(e));
  const nan = await refusal(lh.updateJson(file, () => ({ x: NaN })));
  assert.ok(nan instanceof lh.InvalidInput, String(nan));
  assert.deepEqual(readFileSync(file), before);
  // Let go: a write from another process does not wait.
  const writer = nodeChild(
    `import { writeJson } from 'leasehold';
     await writeJson(process.argv[1], 'after');
     console.log('wrote');`,
    [file],
  );
  assert.equal(await writer.line(), 'wrote');
  assert.equal(readFileSync(file, 'utf8'), '"after"\n');
});

test('an update waiting for a lock another process holds, and one holding it, never block the event loop', async () => {
  const file = path.join(tempDir(), 'slow.json');
  const holder = nodeChild(
    `import { lock } from 'leasehold';
     await lock(process.argv[1] + '.lock');
     console.log('locked');
     process.stdin.once('data', () => process.exit(0));`,
    [file],
  );
  assert.equal(await holder.line(), 'locked');
  let ticks = 0;
  const timer = setInterval(() => (ticks += 1), 10);
  let seen;
  const update = lh.updateJson(file, async (v) => {
    seen = v;
    await sleep(100);
    return 'mine';
  });
  await sleep(300);
  assert.ok(ticks >= 10, `the loop ran (${ticks} ticks) while the update waited`);
  assert.equal(seen, undefined, 'the function waits for the lock');
  holder.stdin.write('go\n');
  assert.equal(await update, 'mine');
  clearInterval(timer);
  assert.equal(readFileSync(file, 'utf8'), '"mine"\n');
});

test('a write that would wait for a lock this program holds is refused at once', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'self.json');
  const other = path.join(dir, 'other.json');
  await lh.writeJson(file, 0);
  const e = await refusal(
    lh.updateJson(file, async (v) => {
      await lh.writeJson(other, 'another file is fine');
      const inner = await refusal(lh.writeJson(file, 'inner'));
      assert.ok(inner instanceof lh.InvalidInput, String(inner));
      assert.match(inner.message, /inside updateJson's function on the same file would wait for ever/);
      await refusal(lh.updateJson(file, () => 'nested'));
      throw inner;
    }),
  );
  assert.ok(e instanceof lh.InvalidInput);
  assert.equal(readFileSync(file, 'utf8'), '0\n');
  assert.equal(readFileSync(other, 'utf8'), '"another file is fine"\n');

  const held = await lh.lock(`${file}.lock`);
  const refused = await refusal(lh.writeFile(file, 'x'));
  assert.ok(refused instanceof lh.InvalidInput, String(refused));
  assert.match(refused.message, /a FileLock of this program holds/);
  held.release();
  await lh.writeFile(file, 'x');
  assert.equal(readFileSync(file, 'utf8'), 'x');
});

test('a locked file is never changed: bytes, mode and times', async () => {
  const file = path.join(tempDir(), 'config.toml');
  writeFileSync(file, 'answer = 42\n');
  chmodSync(file, 0o640);
  utimesSync(file, new Date('2020-01-02T03:04:05Z'), new Date('2020-01-02T03:04:05Z'));
  const before = facts(file);
  for (const opts of [{}, { shared: true }, { wait: 1000 }]) {
    const l = await lh.lock(file, opts);
    assert.equal(l.path, file);
    assert.equal(l.locked, true);
    l.release();
    assert.equal(l.locked, false);
  }
  // `await using l = await lh.lock(file)` (Node 20 has no such syntax yet).
  const disposed = await lh.lock(file);
  await disposed[Symbol.asyncDispose]();
  assert.equal(disposed.locked, false);
  await disposed[Symbol.asyncDispose]();
  assert.deepEqual(facts(file), before);
});

test('two processes never hold one exclusive lock at once', async () => {
  const dir = tempDir();
  const log = path.join(dir, 'log');
  writeFileSync(log, '');
  const holders = [1, 2].map(() =>
    nodeChild(
      `import { lock } from 'leasehold';
       import { appendFileSync } from 'node:fs';
       const [dir, log] = process.argv.slice(1);
       for (let i = 0; i < 25; i += 1) {
         const held = await lock(dir + '/', { wait: true });
         appendFileSync(log, 'in ' + process.pid + '\\n');
         await new Promise((r) => setTimeout(r, 2));
         appendFileSync(log, 'out ' + process.pid + '\\n');
         held.release();
       }
       console.log('done');`,
      [path.join(dir, 'locked'), log],
    ),
  );
  for (const h of holders) assert.equal(await h.line(), 'done');
  const lines = readFileSync(log, 'utf8').trim().split('\n');
  assert.equal(lines.length, 100);
  for (let i = 0; i < lines.length; i += 2) {
    const [pin, pout] = [lines[i].split(' '), lines[i + 1].split(' ')];
    assert.deepEqual([pin[0], pout[0], pout[1]], ['in', 'out', pin[1]], `lines ${i}-${i + 1}: ${lines[i]}, ${lines[i + 1]}`);
  }
});

test('a held lock is refused with Held naming the holder pid; a wait with a limit ends in WaitTimeout', async () => {
  const file = path.join(tempDir(), 'job.lock');
  const holder = nodeChild(
    `import { lock } from 'leasehold';
     await lock(process.argv[1]);
     console.log('locked');
     setInterval(() => {}, 1000);`,
    [file],
  );
  assert.equal(await holder.line(), 'locked');
  const e = await refusal(lh.lock(file));
  assert.ok(e instanceof lh.Held && !(e instanceof lh.WaitTimeout), String(e));
  assert.equal(e.message, `${file} is locked by pid ${holder.pid}. Try again later, or wait with { wait: DURATION }`);
  assert.equal(e.path, file);
  assert.deepEqual(
    e.holders.map((h) => [h.pid, h.mode, h.token, h.expiresAt]),
    [[holder.pid, 'exclusive', null, null]],
  );
  const timedOut = await refusal(lh.lock(file, { wait: 200 }));
  assert.ok(timedOut instanceof lh.WaitTimeout, String(timedOut));
  assert.match(timedOut.message, new RegExp(`still locked by pid ${holder.pid}`));
  holder.kill('SIGKILL');
  await holder.ended;
  const mine = await lh.lock(file, { wait: 5000 });
  mine.release();
});

test('an AbortSignal ends a lock wait, which never takes the lock after', async () => {
  const file = path.join(tempDir(), 'abort.lock');
  const holder = await lh.lock(file);
  const controller = new AbortController();
  const waiting = lh.lock(file, { wait: true, signal: controller.signal });
  await sleep(100);
  controller.abort();
  try {
    const e = await refusal(waiting, 2000);
    assert.equal(e.name, 'AbortError');
  } finally {
    holder.release();
  }
  // Nobody holds it now, nor takes it later: another process locks it at once, again and again.
  const checker = nodeChild(
    `import { lock } from 'leasehold';
     for (let i = 0; i < 20; i += 1) {
       (await lock(process.argv[1])).release();
       await new Promise((r) => setTimeout(r, 20));
     }
     console.log('free');`,
    [file],
  );
  assert.equal(await checker.line(), 'free');
  // Aborted already: refused before anything is done.
  await assert.rejects(lh.lock(file, { signal: controller.signal }), { name: 'AbortError' });
});

test('a Worker that ends holding a lock lets it go', async () => {
  const file = path.join(tempDir(), 'worker.lock');
  const entry = new URL('../index.js', import.meta.url).pathname;
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const { lock } = require(workerData.entry);
     lock(workerData.file).then(() => {
       parentPort.postMessage('locked');
       setInterval(() => {}, 1000);
     });`,
    { eval: true, workerData: { entry, file } },
  );
  try {
    await new Promise((resolve) => worker.once('message', resolve));
    assert.ok((await refusal(lh.lock(file))) instanceof lh.Held);
  } finally {
    await worker.terminate();
  }
  const mine = await lh.lock(file, { wait: 5000 });
  mine.release();
});

test('a symlink planted in place of a state file or a lock is refused, never followed', async () => {
  const dir = tempDir();
  const victim = path.join(dir, 'victim');
  writeFileSync(victim, 'precious\n');
  const before = facts(victim);
  const link = path.join(dir, 'state.json');
  symlinkSync(victim, link);
  const attempts = [
    () => lh.writeFile(link, 'x'),
    () => lh.writeJson(link, { x: 1 }, { fence: 7 }),
    () => lh.updateJson(link, () => 'x'),
    () => lh.lock(link),
  ];
  for (const attempt of attempts) {
    const e = await refusal(attempt());
    assert.ok(e instanceof lh.InvalidInput, String(e));
    assert.match(e.message, /symbolic link/);
  }
  // A link at the sidecar lock file is refused too.
  const file = path.join(dir, 'data.json');
  symlinkSync(victim, `${file}.lock`);
  assert.ok((await refusal(lh.writeJson(file, 1))) instanceof lh.InvalidInput);
  assert.ok(lstatSync(link).isSymbolicLink());
  assert.deepEqual(facts(victim), before);
  assert.equal(existsSync(file), false);
});

test('bad input is refused with InvalidInput, naming it, before anything is done', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'f.json');
  const cases = [
    [() => lh.writeFile(42, 'x'), /the path must be a string or a file: URL, not 42/],
    [() => lh.writeFile(undefined, 'x'), /the path must be a string/],
    [() => lh.writeJson(new URL('https://example.com/f'), 1), /must be a file: URL, not https:/],
    [() => lh.lock({}), /the path must be a string/],
    [() => lh.writeFile(file, 42), /data must be a string, a Buffer, a TypedArray or a DataView .*not 42/],
    [() => lh.writeFile(file, { a: 1 }), /for a JSON value use writeJson/],
    [() => lh.writeFile(file, null), /data must be/],
    [() => lh.writeJson(file, undefined), /undefined is not JSON/],
    [() => lh.writeJson(file, () => 1), /function is not JSON/],
    [() => lh.writeJson(file, { n: 1n }), /not JSON: Do not know how to serialize a BigInt/],
    [() => lh.writeJson(file, { x: NaN }), /NaN \(at key "x"\) is not JSON/],
    [() => lh.writeJson(file, [Infinity]), /Infinity .* is not JSON/],
    [() => lh.writeJson(file, (() => { const c = {}; c.c = c; return c; })()), /circular/],
    [() => lh.writeFile(file, 'x', { fense: 1 }), /unknown option "fense"; the options are fence, fenceLease, fenceNewLease, mode/],
    [() => lh.lock(file, { wiat: 1 }), /unknown option "wiat"/],
    [() => lh.updateJson(file, (v) => v, { defualt: 1 }), /unknown option "defualt"/],
    [() => lh.writeFile(file, 'x', { mode: '644' }), /mode must be a number, not "644"/],
    [() => lh.writeFile(file, 'x', { mode: 0o10000 }), /4096 is not a file mode/],
    [() => lh.writeFile(file, 'x', { mode: 1.5 }), /not a file mode/],
    [() => lh.writeFile(file, 'x', { fence: true }), /fence must be a Lease, a task or a fencing token \(a number\), not true/],
    [() => lh.writeFile(file, 'x', { fence: '7' }), /fence must be/],
    [() => lh.writeFile(file, 'x', { fence: -1 }), /not a fencing token/],
    [() => lh.writeFile(file, 'x', { fence: 2.5 }), /not a fencing token/],
    [() => lh.writeFile(file, 'x', { fence: { token: 1, grant: 'nope' } }), /grant/],
    [() => lh.writeFile(file, 'x', { fenceNewLease: true }), /give fence/],
    [() => lh.writeFile(file, 'x', { fence: 3, fenceNewLease: true }), /fenceNewLease needs the lease's name/],
    [() => lh.writeFile(file, 'x', { fence: 3, fenceLease: 'a\u0000b' }), /invalid lease name/],
    [() => lh.writeFile(file, 'x', 'fast'), /the options must be an object/],
    [() => lh.updateJson(file, 'not a function'), /the second argument must be a function/],
    [() => lh.updateJson(file, (v) => v, { default: 1n }), /not JSON/],
    [() => lh.lock(file, { shared: 'yes' }), /shared must be a boolean/],
    [() => lh.lock(file, { wait: 'soon' }), /wait/],
    [() => lh.lock(file, { signal: {} }), /signal must be an AbortSignal/],
  ];
  for (const [attempt, message] of cases) {
    const e = await refusal(attempt());
    assert.ok(e instanceof lh.InvalidInput, `${message}: ${e}`);
    assert.match(e.message, message);
  }
  const fenced = await refusal(lh.writeFile(file, 'x', { fence: { token: 1, grant: 'nope' } }));
  assert.ok(fenced instanceof lh.InvalidInput);
  assert.deepEqual(readdirSync(dir), [], 'nothing was written or locked');
});

test('writes keep a mode; a file: URL is a path; bytes and text are written as given', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'secret');
  await lh.writeFile(new URL(`file://${file}`), new Uint8Array([0, 1, 2, 255]), { mode: 0o600 });
  assert.deepEqual([...readFileSync(file)], [0, 1, 2, 255]);
  assert.equal(statSync(file).mode & 0o7777, 0o600);
  await lh.writeFile(file, 'é\n');
  assert.equal(readFileSync(file, 'utf8'), 'é\n');
  assert.equal(statSync(file).mode & 0o7777, 0o600, "the old file's mode is kept");
  appendFileSync(`${file}.json`, '{"a": [1, 2]}');
  assert.deepEqual(await lh.updateJson(`${file}.json`, (v) => ({ ...v, b: true })), { a: [1, 2], b: true });
  writeFileSync(`${file}.bad`, '{half');
  const corrupt = await refusal(lh.updateJson(`${file}.bad`, () => assert.fail('called')));
  assert.ok(corrupt instanceof lh.BadData, String(corrupt));
  assert.equal(readFileSync(`${file}.bad`, 'utf8'), '{half');
});
