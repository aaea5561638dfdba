// Leader election: store.campaign and store.observe on every store. What
// must never happen: two leaders at once, a loss nobody hears of, a wait
// that outlives its AbortSignal in the store's queue, an observer that
// does not end when told, a leadership left held (or a campaign left
// queued) by a Worker or process that ended, a wait that holds the event
// loop or libuv's pool.
import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
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
  packageDir,
  settledWithin,
} from './support.mjs';

eachStore('three processes campaigning never lead at once', async (t, store, s) => {
  const name = unique('leaders');
  const terms = 3;
  const candidates = [0, 1, 2].map((i) =>
    nodeChild(
      `import { Store } from 'leasehold';
       const [url, name, id, terms] = process.argv.slice(1);
       const store = new Store(url);
       const led = [];
       for (let i = 0; i < Number(terms); i += 1) {
         const leadership = await store.campaign(name, { id, ttl: '10s', wait: '60s' });
         const start = Date.now();
         let leading = leadership.isLeader;
         await new Promise((r) => setTimeout(r, 30));
         leading &&= leadership.isLeader;
         led.push({ who: id, token: leadership.token, start, end: Date.now(), leading });
         await leadership.resign();
       }
       console.log(JSON.stringify(led));
       store.close();`,
      [s.url, name, `candidate-${i}`, String(terms)],
    ),
  );
  const intervals = [];
  for (const c of candidates) intervals.push(...JSON.parse(await c.line()));
  assert.equal(intervals.length, 3 * terms, 'every term was led');
  assert.ok(intervals.every((i) => i.leading), 'a leader was told it did not lead');
  assert.deepEqual(overlapping(intervals), [], 'two leaders at once');
  const tokens = intervals.sort((a, b) => a.start - b.start).map((i) => i.token);
  assert.deepEqual(tokens, [...tokens].sort((a, b) => a - b), 'a later leader had an older token');
  assert.equal(new Set(tokens).size, tokens.length, 'a token was reissued');
});

eachStore('one try or a limit gives up out of the queue; the observer sees each leader in turn', async (t, store) => {
  const name = unique('turns');
  const observer = store.observe(name);
  assert.deepEqual((await observer.next()).value, { name, leader: null });
  const a = await store.campaign(name, { id: 'a', ttl: '10s' });
  assert.ok(a instanceof lh.Leadership && a.isLeader, String(a));
  const seen = (await observer.next()).value.leader;
  assert.deepEqual([seen.owner, seen.token, seen.pid], ['a', a.token, process.pid]);

  assert.equal(await store.campaign(name, { id: 'b', wait: false }), null);
  assert.equal(await store.campaign(name, { id: 'b', wait: 200 }), null);
  assert.equal((await store.status(name)).waiters, 0, 'a campaign that gave up left the queue');
  const twice = await store.campaign(name, { id: 'a' }).then(() => assert.fail('two leaders under one id'), (e) => e);
  assert.ok(twice instanceof lh.Held, String(twice));
  assert.match(twice.message, /candidate id "a" already leads/);

  const b = store.campaign(name, { id: 'b', wait: true });
  await waitFor(async () => (await store.status(name)).waiters === 1);
  await a.resign();
  await a.resign();
  assert.deepEqual([a.isLeader, a.resigned, a.lost], [false, true, false]);
  const next = await b;
  assert.ok(next.token > a.token);
  // Straight to b, or via "no leader" when the observer looked between.
  let change = (await observer.next()).value;
  if (change.leader === null) change = (await observer.next()).value;
  assert.deepEqual([change.leader.owner, change.leader.token], ['b', next.token]);
  await next[Symbol.asyncDispose]();
  assert.deepEqual((await observer.next()).value, { name, leader: null }, 'asyncDispose resigned');
  assert.deepEqual(await observer.return(), { done: true, value: undefined });
  assert.deepEqual(await observer.next(), { done: true, value: undefined });
});

eachStore('an AbortSignal ends a campaign’s wait (out of the queue) and an observer’s loop', async (t, store) => {
  const name = unique('abort');
  const leader = await store.campaign(name, { id: 'leader' });
  const controller = new AbortController();
  const waiting = store.campaign(name, { id: 'waiter', signal: controller.signal });
  await waitFor(async () => (await store.status(name)).waiters === 1);
  controller.abort();
  const { error } = await settledWithin(waiting, 10_000);
  assert.equal(error?.name, 'AbortError', 'the abort did not end the wait');
  assert.equal((await store.status(name)).waiters, 0, 'the wait left the queue');
  await assert.rejects(store.campaign(name, { id: 'waiter', signal: controller.signal }), { name: 'AbortError' });

  const watching = new AbortController();
  const changes = [];
  const loop = (async () => {
    for await (const change of store.observe(name, { signal: watching.signal })) changes.push(change);
  })();
  await waitFor(() => changes.length === 1);
  watching.abort();
  assert.deepEqual(await settledWithin(loop, 10_000), { value: undefined }, 'the abort did not end the loop');
  assert.equal(changes[0].leader.owner, 'leader');
  // Leaving the loop ends the observer too.
  for await (const change of store.observe(name)) {
    assert.equal(change.leader.token, leader.token);
    break;
  }
  await leader.resign();
});

test('campaigns waiting hold neither the event loop nor libuv’s pool', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 'p.db'));
  const leader = await store.campaign('p', { id: 'leader' });
  const controller = new AbortController();
  // More waits than libuv's pool has threads (4).
  const waits = Array.from({ length: 8 }, (_, i) =>
    store.campaign('p', { id: `w${i}`, signal: controller.signal }).catch((e) => e),
  );
  await waitFor(async () => (await store.status('p')).waiters === 8);
  const started = Date.now();
  await stat(packageDir);
  assert.ok(Date.now() - started < 2000, 'fs waited behind the campaigns');
  controller.abort();
  for (const e of await Promise.all(waits)) assert.equal(e.name, 'AbortError');
  await leader.resign();
  store.close();
});

test('a lost leadership is pushed: whenLost, signal, isLeader', async () => {
  const file = path.join(tempDir(), 'l.db');
  const store = lh.Store.sqlite(file);
  const leadership = await store.campaign('l', { id: 'me', ttl: '1s' });
  const blocker = await blockSqlite(file);
  const lost = await Promise.race([leadership.whenLost, sleep(5000).then(() => null)]);
  blocker.kill('SIGKILL');
  assert.ok(lost instanceof lh.LeaseLost, 'whenLost resolved with the LeaseLost');
  assert.match(lost.message, /^leadership of l \(token 1\) was lost: /);
  assert.deepEqual([leadership.isLeader, leadership.lost], [false, true]);
  assert.equal(leadership.signal.reason, lost);
  await leadership.resign().catch(() => {});
  store.close();
});

test('a Worker or process that ends leading resigns; a Worker that ends waiting leaves the queue', async () => {
  const file = path.join(tempDir(), 'w.db');
  const store = lh.Store.sqlite(file);
  const entry = path.join(packageDir, 'index.js');
  const leading = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const { Store } = require(workerData.entry);
     Store.sqlite(workerData.file).campaign('w', { id: 'worker', ttl: '1h' }).then((l) => {
       parentPort.postMessage(l.token);
       setInterval(() => {}, 1000);
     });`,
    { eval: true, workerData: { entry, file } },
  );
  const token = await new Promise((resolve) => leading.once('message', resolve));
  const waiting = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const { Store } = require(workerData.entry);
     Store.sqlite(workerData.file).campaign('w', { id: 'queued' }).then(() => parentPort.postMessage('led'));
     setInterval(() => {}, 1000);`,
    { eval: true, workerData: { entry, file } },
  );
  await waitFor(async () => (await store.status('w')).waiters === 1);
  await waiting.terminate();
  // The leader leads on: only the Worker's end can have dequeued it.
  await waitFor(async () => (await store.status('w')).waiters === 0, 5000);
  assert.equal((await store.status('w')).grants[0].token, token);
  await leading.terminate();
  // Same process, a TTL of an hour: only the Worker's end can have
  // resigned.
  const next = await store.campaign('w', { id: 'next', wait: '5s' });
  assert.ok(next && next.token === token + 1, 'the ended Worker still leads, or the queued one led');
  await next.resign();

  const exits = nodeChild(
    `import { Store } from 'leasehold';
     const l = await Store.sqlite(process.argv[1]).campaign('x', { id: 'child', ttl: '1h' });
     console.log(l.token);`,
    [file],
  );
  await exits.line();
  assert.deepEqual(await exits.ended, { code: 0, signal: null });
  assert.deepEqual((await store.status('x')).grants, [], 'resigned at exit');
  store.close();
});

test('bad input is refused with InvalidInput, naming it, before anything is done', async () => {
  const store = lh.Store.sqlite(path.join(tempDir(), 'b.db'));
  const cases = [
    [undefined, /\{ id \} is required/],
    [{ id: '' }, /\{ id \} is required/],
    [{ id: 7 }, /id must be a string/],
    [{ id: 'a', wiat: 5 }, /unknown option "wiat"/],
    [{ id: 'a', ttl: -1 }, /not a duration/],
    [{ id: 'a', wait: 'soon' }, /wait/],
    [{ id: 'a', signal: 'stop' }, /signal must be an AbortSignal/],
  ];
  for (const [opts, message] of cases) {
    const e = await store.campaign('b', opts).then(() => assert.fail(`led with ${JSON.stringify(opts)}`), (x) => x);
    assert.ok(e instanceof lh.InvalidInput, `${JSON.stringify(opts)}: ${e}`);
    assert.match(e.message, message);
  }
  await assert.rejects(store.campaign('', { id: 'a' }), lh.InvalidName);
  assert.throws(() => store.observe(''), lh.InvalidName);
  assert.throws(() => store.observe('b', { signl: null }), /unknown option "signl"/);
  assert.equal(await store.status('b'), null, 'nothing was granted');
  store.close();
});
