// The task queue as a Node.js program uses it, on every store with one
// (SQLite, PostgreSQL; the others refuse it). What must never happen: a
// task done twice, a task lost (never done and never claimable again), a
// claim that outlives its AbortSignal's abort in the queue's wait, a
// report by a lost claim accepted, a claim left held by a process or a
// Worker that ended.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { test } from 'node:test';
import { promisify } from 'node:util';
import path from 'node:path';
import { eachStore, unique, nodeChild, blockSqlite, waitFor, tempDir, sleep, BIN, CI } from './support.mjs';
import * as lh from '../index.mjs';

const QUEUES = ['sqlite', 'postgres'];
const rejection = (promise) => promise.then((v) => assert.fail(`resolved with ${v}`), (e) => e);

/**
 * The queue's tasks as the `leasehold` CLI lists them — a reader that
 * shares no code with the package (only the store).
 */
async function listed(url, queue) {
  const { stdout } = await promisify(execFile)(BIN, ['--store', url, '--json', 'task', 'list', queue, '--limit', '1000']);
  const list = JSON.parse(stdout);
  assert.equal(list.more, false);
  return list.tasks;
}

eachStore(
  'a task is done once: no second claim, no second report, never claimable again',
  async (t, store) => {
    const q = store.queue(unique('once'));
    const id = await q.add({ n: 1, s: 'é' });
    const task = await q.claim({ ttl: '30s' });
    assert.deepEqual([task.id, task.payload, task.attempt, task.maxAttempts], [id, { n: 1, s: 'é' }, 1, 5]);
    assert.ok(task.token >= 1 && !task.lost && task.outcome === null);
    task.check();
    assert.ok((await rejection(q.claim())) instanceof lh.NothingToClaim, 'claimed twice');
    await task.done({ ok: true });
    assert.equal(task.outcome, 'done');
    for (const again of [() => task.done(), () => task.fail(new Error('x')), () => task.release()]) {
      const e = await rejection(again());
      assert.ok(e instanceof lh.InvalidInput, String(e));
      assert.match(e.message, /was already reported \(done\): this \w+\(\) was not recorded/);
    }
    assert.throws(() => task.check(), lh.LeaseLost);
    await task[Symbol.asyncDispose]();
    const shown = await q.get(id);
    assert.deepEqual([shown.state, shown.result, shown.attempts], ['done', { ok: true }, 1]);
    const e = await rejection(q.claim({ wait: 300 }));
    assert.ok(e instanceof lh.NothingToClaim && e.code === 'LEASEHOLD_NOTHING_TO_CLAIM', String(e));
    assert.match(e.message, /nothing to claim in queue once-.* after waiting 300ms/);
    assert.equal(await q.get('never-added'), null);
  },
  { kinds: QUEUES },
);

eachStore(
  'release hands back uncharged; fail retries, then the task is dead; an unreported task is failed by await using',
  async (t, store) => {
    const q = store.queue(unique('fail'));
    // Negative priorities are the library's too: higher is claimed first.
    const low = await q.add('low', { priority: -5 });
    const id = await q.add('high', { priority: 3, maxAttempts: 2, id: 'job-1' });
    assert.equal(id, 'job-1');
    assert.equal(await q.add('high', { priority: 3, maxAttempts: 2, id: 'job-1' }), 'job-1', 'the same task again: a no-op');
    const other = await rejection(q.add('other', { id: 'job-1' }));
    assert.ok(other instanceof lh.InvalidInput && /exists as another task; nothing was added/.test(other.message), String(other));
    let task = await q.claim();
    assert.equal(task.id, id);
    await task.release();
    assert.equal(task.outcome, 'released');
    task = await q.claim();
    assert.deepEqual([task.id, task.attempt], [id, 1], 'a hand back charges no attempt');
    const rest = await q.claim();
    assert.equal(rest.id, low);
    await rest.done();
    // What `await using held = task; …` does (Node 20 has no syntax for it)
    // when its block throws or forgets done().
    try {
      assert.equal(task.payload, 'high');
    } finally {
      await task[Symbol.asyncDispose]();
    }
    assert.equal(task.outcome, 'retrying');
    let shown = await q.get(id);
    assert.equal(shown.state, 'pending');
    assert.match(shown.last_error, /not reported .* before its `await using` block ended/);
    const last = await q.claim({ wait: '30s' });
    assert.deepEqual([last.id, last.attempt], [id, 2]);
    assert.equal(await last.fail(new Error('boom again'), { retry: false }), 'dead');
    shown = await q.get(id);
    assert.equal(shown.state, 'dead');
    assert.match(shown.last_error, /^Error: boom again\n\s+at /);
    assert.ok((await rejection(q.claim())) instanceof lh.NothingToClaim);
  },
  { kinds: QUEUES },
);

eachStore(
  'three processes, four tasks each at a time: every task done exactly once, by the claim that ran it',
  async (t, store, s) => {
    if (!BIN) {
      if (CI) assert.fail('CI=true, and LEASEHOLD_BIN is not set: the checker reads the store with the CLI');
      t.skip('LEASEHOLD_BIN is not set: the checker reads the store with the leasehold CLI');
      return;
    }
    const queue = unique('many');
    const q = store.queue(queue);
    const n = 60;
    const ids = [];
    for (let i = 0; i < n; i += 1) ids.push(await q.add({ i }, { priority: i % 3 }));
    const children = [0, 1, 2].map(() =>
      nodeChild(
        `import { Store } from 'leasehold';
         const [url, queue] = process.argv.slice(1);
         const store = new Store(url);
         const counts = await store.queue(queue).worker(async (task) => {
           console.log(JSON.stringify({ id: task.id, token: task.token, i: task.payload.i }));
           await new Promise((r) => setTimeout(r, Math.random() * 30));
           return { token: task.token };
         }, { concurrency: 4, wait: false, ttl: 30_000 });
         console.log(JSON.stringify({ counts }));
         store.close();`,
        [s.url, queue],
      ),
    );
    const runs = [];
    const counts = [];
    for (const c of children) {
      for (;;) {
        let line;
        try {
          line = await c.line();
        } catch {
          break;
        }
        const record = JSON.parse(line);
        if (record.counts) counts.push(record.counts);
        else runs.push(record);
      }
      const ended = await Promise.race([c.ended, sleep(60_000).then(() => 'still running after 60 s')]);
      assert.deepEqual(ended, { code: 0, signal: null });
    }
    // The checker: the runs the children printed, against the store as the CLI lists it.
    const ran = new Map();
    for (const r of runs) {
      assert.ok(!ran.has(r.id), `task ${r.id} ran twice (tokens ${ran.get(r.id)?.token}, ${r.token})`);
      ran.set(r.id, r);
    }
    assert.deepEqual([...ran.keys()].sort(), [...ids].sort(), 'every task ran');
    const tasks = await listed(s.url, queue);
    assert.equal(tasks.length, n);
    for (const task of tasks) {
      assert.equal(task.state, 'done', `task ${task.id} is ${task.state}`);
      assert.equal(task.attempts, 1, `task ${task.id}: ${task.attempts} attempts`);
      assert.deepEqual(task.result, { token: ran.get(task.id).token }, `task ${task.id} done by another claim`);
    }
    assert.equal(counts.length, 3);
    const total = counts.reduce((a, c) => ({ done: a.done + c.done, other: a.other + c.failed + c.dead + c.lost + c.released }), {
      done: 0,
      other: 0,
    });
    assert.deepEqual(total, { done: n, other: 0 });
  },
  { kinds: QUEUES },
);

eachStore(
  'an AbortSignal ends a claim\'s wait: the aborted claim takes nothing added later',
  async (t, store) => {
    const q = store.queue(unique('abort'));
    const controller = new AbortController();
    const waiting = q.claim({ wait: true, signal: controller.signal });
    await sleep(300);
    controller.abort();
    const e = await Promise.race([rejection(waiting), sleep(3000).then(() => 'still waiting')]);
    assert.equal(e.name, 'AbortError', String(e));
    const id = await q.add('after');
    await sleep(500);
    assert.equal((await q.get(id)).state, 'pending', 'the aborted wait claimed it');
    await assert.rejects(q.claim({ wait: true, signal: controller.signal }), { name: 'AbortError' });
    const task = await q.claim();
    assert.equal(task.id, id);
    await task.done();
  },
  { kinds: QUEUES },
);

eachStore(
  'worker: done with the result, failed with the throw, stops on its signal once the tasks in flight settle',
  async (t, store) => {
    const q = store.queue(unique('worker'));
    const ok = await q.add('ok');
    const bad = await q.add('throw');
    const big = await q.add('bigint');
    const slow = await q.add('slow', { priority: -1 });
    let finish;
    const started = new Promise((r) => {
      finish = r;
    });
    let release;
    const gate = new Promise((r) => {
      release = r;
    });
    const controller = new AbortController();
    const working = q.worker(
      async (task) => {
        assert.ok(task.signal instanceof AbortSignal && !task.signal.aborted);
        if (task.payload === 'throw') throw new Error('it broke');
        if (task.payload === 'bigint') return 1n;
        if (task.payload === 'slow') {
          finish();
          await gate;
        }
        return { from: task.payload };
      },
      { concurrency: 2, signal: controller.signal },
    );
    await started;
    controller.abort();
    let settled = false;
    working.finally(() => {
      settled = true;
    });
    await sleep(300);
    assert.equal(settled, false, 'the worker ended with a task in flight');
    release();
    const counts = await working;
    assert.deepEqual(counts, { done: 2, failed: 2, dead: 0, lost: 0, released: 0 });
    assert.deepEqual((await q.get(ok)).result, { from: 'ok' });
    assert.deepEqual((await q.get(slow)).result, { from: 'slow' });
    assert.match((await q.get(bad)).last_error, /^Error: it broke/);
    assert.match((await q.get(big)).last_error, /the result is not JSON: .*BigInt/);
    assert.equal((await q.get(big)).state, 'pending');
  },
  { kinds: QUEUES },
);

eachStore(
  'a store without a task queue refuses it, naming the stores that have one',
  async (t, store) => {
    const e = await rejection(store.queue('q').add(1));
    assert.ok(e instanceof lh.Unsupported, String(e));
    assert.match(e.message, /sqlite.*postgres/i);
  },
  { kinds: ['etcd', 'redis', 'firestore'] },
);

test('a lost claim is pushed, and its report is refused: the task comes back, and is done once', async () => {
  const file = path.join(tempDir(), 'q.db');
  const store = lh.Store.sqlite(file);
  const q = store.queue('q');
  const id = await q.add('x');
  const task = await q.claim({ ttl: '1s' });
  // Another process keeps the store locked: heartbeats fail until the
  // holder-side deadline.
  const blocker = await blockSqlite(file);
  const lost = await Promise.race([task.whenLost, sleep(5000).then(() => null)]);
  blocker.kill('SIGKILL');
  assert.ok(lost instanceof lh.LeaseLost, 'whenLost resolved with the LeaseLost');
  assert.equal(task.lost, true);
  assert.equal(task.signal.aborted, true);
  assert.equal(task.signal.reason, lost);
  assert.match(lost.message, new RegExp(`claim of task q/${id} \\(token ${task.token}\\) was lost: the holder-side deadline passed`));
  assert.throws(() => task.check(), lh.LeaseLost);
  const refused = await rejection(task.done('late'));
  assert.ok(refused instanceof lh.LeaseLost, String(refused));
  assert.equal(task.outcome, 'lost');
  assert.notEqual((await q.get(id)).state, 'done', 'a lost claim reported done');
  // The claim runs out in the store; the task is claimed again, once.
  const again = await q.claim({ wait: '10s' });
  assert.equal(again.id, id);
  assert.ok(again.token > task.token);
  await again.done('on time');
  const shown = await q.get(id);
  assert.deepEqual([shown.state, shown.result], ['done', 'on time']);
  store.close();
});

test('a process that exits holding a claim hands it back; so does a Worker that ends', async () => {
  const file = path.join(tempDir(), 'x.db');
  const store = lh.Store.sqlite(file);
  const q = store.queue('x');
  const id = await q.add('held');
  const exits = nodeChild(
    `import { Store } from 'leasehold';
     const task = await Store.sqlite(process.argv[1]).queue('x').claim({ ttl: '1h' });
     console.log(task.id);`,
    [file],
  );
  assert.equal(await exits.line(), id);
  assert.deepEqual(await exits.ended, { code: 0, signal: null });
  let shown = await q.get(id);
  assert.deepEqual([shown.state, shown.attempts], ['pending', 0], 'handed back at exit, uncharged, not left for 1h');

  const entry = new URL('../index.js', import.meta.url).pathname;
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const { Store } = require(workerData.entry);
     Store.sqlite(workerData.file).queue('x').claim({ ttl: '1h' }).then((task) => {
       parentPort.postMessage(task.id);
       setInterval(() => {}, 1000);
     });`,
    { eval: true, workerData: { entry, file } },
  );
  assert.equal(await new Promise((resolve) => worker.once('message', resolve)), id);
  assert.equal((await q.get(id)).state, 'running');
  await worker.terminate();
  // Same process: only the Worker's cleanup can have handed it back.
  await waitFor(async () => (await q.get(id)).state === 'pending', 5000);
  const task = await q.claim();
  await task.done();
  shown = await q.get(id);
  assert.deepEqual([shown.state, shown.attempts], ['done', 1]);
  store.close();
});

test('a task collected while claimed is handed back, its process living on', async () => {
  const file = path.join(tempDir(), 'gc.db');
  const store = lh.Store.sqlite(file);
  const q = store.queue('gc');
  const id = await q.add('dropped');
  const holder = nodeChild(
    `import v8 from 'node:v8';
     import vm from 'node:vm';
     import { Store } from 'leasehold';
     v8.setFlagsFromString('--expose-gc');
     const gc = vm.runInNewContext('gc');
     let task = await Store.sqlite(process.argv[1]).queue('gc').claim({ ttl: '1h' });
     console.log(task.id);
     task = null;
     for (;;) {
       await new Promise((r) => setTimeout(r, 50));
       gc();
     }`,
    [file],
  );
  assert.equal(await holder.line(), id);
  await waitFor(async () => (await q.get(id)).state === 'pending', 10_000);
  assert.equal(holder.exitCode, null, 'handed back by the collection, not by an exit');
  holder.kill('SIGKILL');
  store.close();
});

test('bad input is refused with InvalidInput or InvalidName, naming it, before anything is done', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 'b.db'));
  for (const bad of ['', 'a\u0000b', 'x'.repeat(1000), 42, undefined]) {
    assert.throws(() => store.queue(bad), lh.InvalidName, `queue ${JSON.stringify(bad)}`);
  }
  const q = store.queue('b');
  const cyclic = {};
  cyclic.self = cyclic;
  const payloads = [
    [10n, /the payload is not JSON: .*BigInt/],
    [cyclic, /the payload is not JSON: .*circular/i],
    [undefined, /the payload is not JSON: undefined has no JSON form/],
    [() => 1, /the payload is not JSON: function has no JSON form/],
  ];
  for (const [payload, message] of payloads) {
    const e = await rejection(q.add(payload));
    assert.ok(e instanceof lh.InvalidInput, String(e));
    assert.match(e.message, message);
  }
  const adds = [
    [{ priorty: 1 }, /unknown option "priorty"; the options are id, priority, delay, at, maxAttempts/],
    [{ priority: 1.5 }, /priority: 1.5 is not a whole number/],
    [{ priority: 2 ** 60 }, /priority: .* is not a whole number/],
    [{ priority: '1' }, /priority must be a number/],
    [{ maxAttempts: 0 }, /maxAttempts: 0 is not a whole number from 1/],
    [{ delay: '1s', at: new Date() }, /give delay or at, not both/],
    [{ at: new Date(NaN) }, /at: NaN is not a time/],
    [{ at: '2030-01-01' }, /at must be a Date/],
    [{ delay: -1 }, /delay: -1 ms is not a duration/],
    [{ delay: '200y' }, /delay/],
  ];
  for (const [opts, message] of adds) {
    const e = await rejection(q.add('p', opts));
    assert.ok(e instanceof lh.InvalidInput, `${JSON.stringify(opts)}: ${e}`);
    assert.match(e.message, message);
  }
  await assert.rejects(q.add('p', { id: '' }), lh.InvalidName);
  await assert.rejects(q.get(7), lh.InvalidName);
  for (const [opts, message] of [
    [{ wiat: true }, /unknown option "wiat"/],
    [{ ttl: -1 }, /not a duration/],
    [{ wait: 'soon' }, /wait/],
    [{ heartbeat: '2m', ttl: '1m' }, /cannot keep a grant/],
    [{ signal: 'stop' }, /signal must be an AbortSignal/],
  ]) {
    const e = await rejection(q.claim(opts));
    assert.ok(e instanceof lh.InvalidInput, `${JSON.stringify(opts)}: ${e}`);
    assert.match(e.message, message);
  }
  await assert.rejects(q.worker('fn'), /the first argument must be a function/);
  await assert.rejects(q.worker(() => {}, { concurrency: 0 }), /concurrency must be a whole number from 1/);
  await assert.rejects(q.worker(() => {}, { concurency: 2 }), /unknown option "concurency"/);
  assert.ok((await rejection(q.claim())) instanceof lh.NothingToClaim, 'nothing was added');
  // A refused report records nothing: the claim is still held.
  await q.add('p');
  const task = await q.claim();
  await assert.rejects(task.done(10n), /done: the result is not JSON/);
  await assert.rejects(task.fail('e', { retry: 'no' }), /retry must be a boolean/);
  assert.equal(task.outcome, null);
  await task.done();
  store.close();
});
