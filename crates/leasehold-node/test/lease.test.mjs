// Leases as a Node.js program uses them, on every store. What must never
// happen: two holders at once, a token reissued or going back, a wait
// that outlives its AbortSignal in the store's queue, a loss nobody hears
// of, a grant left renewing after its holder (a process, a Worker) ended.
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { eachStore, unique, nodeChild, blockSqlite, waitFor, tempDir, sleep } from './support.mjs';
import { test } from 'node:test';
import path from 'node:path';
import * as lh from '../index.mjs';

eachStore('one holder at a time, and tokens only grow', async (t, store) => {
  const name = unique('one');
  const a = await store.acquire(name, { ttl: '30s' });
  assert.equal(a.held, true);
  const refused = await store.acquire(name).then(
    () => assert.fail('a second holder'),
    (e) => e,
  );
  assert.ok(refused instanceof lh.Held && refused.code === 'LEASEHOLD_HELD', String(refused));
  assert.equal(refused.holders.length, 1);
  assert.equal(refused.holders[0].token, a.token);
  assert.equal(refused.holders[0].pid, process.pid);
  assert.match(refused.message, /wait with \{ wait: DURATION \}/);
  await a.release();
  const b = await store.acquire(name);
  assert.ok(b.token > a.token, `${b.token} after ${a.token}`);
  await b.release();
});

eachStore('waiters are served first come, first served, when the holder releases', async (t, store) => {
  const name = unique('fifo');
  const holder = await store.acquire(name, { ttl: '30s' });
  const order = [];
  const first = store.acquire(name, { wait: true }).then((l) => (order.push('first'), l));
  await waitFor(async () => (await store.status(name)).waiters === 1);
  const second = store.acquire(name, { wait: '30s' }).then((l) => (order.push('second'), l));
  await waitFor(async () => (await store.status(name)).waiters === 2);
  await holder.release();
  const one = await first;
  assert.deepEqual(order, ['first']);
  assert.ok(one.token > holder.token);
  await one.release();
  const two = await second;
  assert.ok(two.token > one.token);
  await two.release();
});

eachStore('a wait with a limit ends in WaitTimeout, naming the holder', async (t, store) => {
  const name = unique('timeout');
  const holder = await store.acquire(name, { owner: 'svc-a' });
  const e = await store.acquire(name, { wait: 300 }).then(() => assert.fail('granted'), (x) => x);
  assert.ok(e instanceof lh.WaitTimeout && e instanceof lh.Held, String(e));
  assert.equal(e.code, 'LEASEHOLD_WAIT_TIMEOUT');
  assert.equal(e.holders[0].owner, 'svc-a');
  assert.match(e.message, /still held after waiting 300ms/);
  assert.equal((await store.status(name)).waiters, 0, 'the wait left the queue');
  await holder.release();
});

eachStore('an AbortSignal ends a wait, which leaves the queue', async (t, store) => {
  const name = unique('abort');
  const holder = await store.acquire(name);
  const controller = new AbortController();
  const waiting = store.acquire(name, { wait: true, signal: controller.signal });
  await waitFor(async () => (await store.status(name)).waiters === 1);
  controller.abort();
  const e = await waiting.then(() => assert.fail('granted'), (x) => x);
  assert.equal(e.name, 'AbortError');
  assert.equal((await store.status(name)).waiters, 0);
  // Aborted already: refused before anything is asked.
  await assert.rejects(store.acquire(name, { wait: true, signal: controller.signal }), { name: 'AbortError' });
  await holder.release();
  const next = await store.acquire(name);
  await next.release();
});

eachStore('withLease releases whether the function returns or throws', async (t, store) => {
  const name = unique('with');
  const token = await store.withLease(name, { ttl: '10s' }, async (lease) => {
    lease.check();
    return lease.token;
  });
  assert.equal(typeof token, 'number');
  await assert.rejects(
    store.withLease(name, async () => {
      throw new Error('boom');
    }),
    /boom/,
  );
  const state = await store.status(name);
  assert.deepEqual(state.grants, [], 'released both times');
  assert.ok(state.last_token > token);
});

eachStore('a release twice is refused; asyncDispose after a release is fine', async (t, store) => {
  const name = unique('twice');
  const lease = await store.acquire(name);
  await lease.release();
  const e = await lease.release().then(() => assert.fail('released twice'), (x) => x);
  assert.ok(e instanceof lh.InvalidInput, String(e));
  assert.match(e.message, new RegExp(`lease ${name} \\(token ${lease.token}\\) was already released`));
  await lease[Symbol.asyncDispose]();
  assert.throws(() => lease.check(), lh.InvalidInput);
});

eachStore('a fence refuses an older token once a newer grant exists', async (t, store) => {
  const name = unique('fence');
  const old = await store.acquire(name, { ttl: '10s' });
  await store.fence(name, old.token);
  await old.release();
  const current = await store.acquire(name);
  const e = await store.fence(name, old.token).then(() => assert.fail('stale passed'), (x) => x);
  assert.ok(e instanceof lh.StaleToken && e.code === 'LEASEHOLD_STALE_TOKEN', String(e));
  await store.fence(name, current.token);
  await current.release();
});

test('a lost grant is pushed: lost, signal, whenLost, check, release', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'l.db');
  const store = lh.Store.sqlite(file);
  const lease = await store.acquire('l', { ttl: '1s' });
  // Another process keeps the store locked: renewals fail until the
  // holder-side deadline.
  const blocker = await blockSqlite(file);
  const lost = await Promise.race([lease.whenLost, sleep(5000).then(() => null)]);
  blocker.kill('SIGKILL');
  assert.ok(lost instanceof lh.LeaseLost, 'whenLost resolved with the LeaseLost');
  assert.equal(lease.lost, true);
  assert.equal(lease.held, false);
  assert.equal(lease.signal.aborted, true);
  assert.equal(lease.signal.reason, lost);
  assert.match(lost.message, /lease l \(token 1\) was lost: the holder-side deadline passed/);
  assert.throws(() => lease.check(), lh.LeaseLost);
  await assert.rejects(lease.release(), lh.LeaseLost);
  store.close();
});

test('bad input is refused with InvalidInput, naming it, before anything is done', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 'b.db'));
  const cases = [
    [{ wiat: 5 }, /unknown option "wiat"/],
    [{ ttl: -1 }, /not a duration/],
    [{ ttl: '2y' }, /./],
    [{ ttl: {} }, /ttl must be a number of milliseconds or a duration string/],
    [{ shared: 0 }, /not a limit/],
    [{ shared: 1.5 }, /not a limit/],
    [{ wait: 'soon' }, /wait/],
    [{ owner: 7 }, /owner must be a string/],
    [{ heartbeat: '2m', ttl: '1m' }, /cannot keep a grant/],
    ['60s', /the options must be an object/],
  ];
  for (const [opts, message] of cases) {
    const e = await store.acquire('b', opts).then(() => assert.fail(`granted with ${JSON.stringify(opts)}`), (x) => x);
    assert.ok(e instanceof lh.InvalidInput, `${JSON.stringify(opts)}: ${e}`);
    assert.match(e.message, message);
  }
  for (const bad of ['', 'a\u0000b', 'x'.repeat(1000), 42]) {
    await assert.rejects(store.acquire(bad), lh.InvalidName);
  }
  await assert.rejects(store.fence('b', 1.5), lh.InvalidInput);
  assert.throws(() => new lh.Store('localhost:5432'), (e) => e instanceof lh.InvalidInput && /no scheme/.test(e.message));
  assert.throws(() => new lh.Store('sqlite:///x.db?mode=ro'), /query string/);
  assert.throws(() => new lh.Store('mysql://h/db'), lh.InvalidInput);
  assert.deepEqual((await store.status('b')), null, 'nothing was granted');
  store.close();
  await assert.rejects(store.acquire('b'), /closed/);
});

test('a holder killed with SIGKILL is taken over at once, with a newer token', async () => {
  const file = path.join(tempDir(), 'k.db');
  const holder = nodeChild(
    `import { Store } from 'leasehold';
     const lease = await Store.sqlite(process.argv[1]).acquire('k', { ttl: '1h' });
     console.log(lease.token);
     setInterval(() => {}, 1000);`,
    [file],
  );
  const token = Number(await holder.line());
  holder.kill('SIGKILL');
  await holder.ended;
  const store = lh.Store.sqlite(file);
  const lease = await store.acquire('k');
  assert.ok(lease.token > token);
  await lease.release();
  store.close();
});

test('a process that exits holding a lease releases it; so does a Worker that ends', async () => {
  const file = path.join(tempDir(), 'x.db');
  const exits = nodeChild(
    `import { Store } from 'leasehold';
     const lease = await Store.sqlite(process.argv[1]).acquire('x', { ttl: '1h' });
     console.log(lease.token);`,
    [file],
  );
  await exits.line();
  assert.deepEqual(await exits.ended, { code: 0, signal: null });
  const store = lh.Store.sqlite(file);
  assert.deepEqual((await store.status('x')).grants, [], 'released at exit, not left to prove dead');

  const entry = new URL('../index.js', import.meta.url).pathname;
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const { Store } = require(workerData.entry);
     Store.sqlite(workerData.file).acquire('w', { ttl: '1h' }).then((lease) => {
       parentPort.postMessage(lease.token);
       setInterval(() => {}, 1000);
     });`,
    { eval: true, workerData: { entry, file } },
  );
  await new Promise((resolve) => worker.once('message', resolve));
  assert.equal((await store.status('w')).grants.length, 1);
  await worker.terminate();
  // Same process, so nobody could prove the holder gone: only the
  // Worker's cleanup can have released it.
  await waitFor(async () => (await store.status('w')).grants.length === 0, 5000);
  const lease = await store.acquire('w');
  await lease.release();
  store.close();
});

eachStore('^C (SIGINT) during a wait ends the process, and its place in the queue holds nobody up', async (t, store, s) => {
  const name = unique('sigint');
  const holder = await store.acquire(name, { ttl: '1m' });
  const waiter = nodeChild(
    `import { Store } from 'leasehold';
     const store = new Store(process.argv[1]);
     setTimeout(() => console.log('waiting'), 0);
     await store.acquire(process.argv[2], { wait: true });
     console.log('granted');`,
    [s.url, name],
  );
  assert.equal(await waiter.line(), 'waiting');
  await waitFor(async () => (await store.status(name)).waiters === 1);
  waiter.kill('SIGINT');
  assert.deepEqual(await waiter.ended, { code: null, signal: 'SIGINT' });
  await holder.release();
  // The dead waiter's registration would last 60 s; an acquirer on this
  // host proves it gone and goes first.
  const started = Date.now();
  const next = await store.acquire(name, { wait: '30s' });
  assert.ok(Date.now() - started < 20_000, `waited ${Date.now() - started} ms behind a dead waiter`);
  await next.release();
});
