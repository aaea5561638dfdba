// A tour of the package, as a TypeScript program: checked by
// `tsc --strict` (scripts/test) and run by test/examples.test.mjs.
import { Held, LeaseLost, Store, lock, updateJson, writeJson, type Lease } from 'leasehold';

const store = new Store(); // $LEASEHOLD_STORE, else the CLI's embedded store
// Or new Store("postgres://agent@db/leases"), "sqlite:///path/to/leasehold.db",
// "etcd://host:2379", "firestore://my-project", "redis://127.0.0.1:6379".

const lease: Lease = await store.acquire('nightly-report', { ttl: '2m' }); // Held when held; { wait: '30s' } waits
console.log('token', lease.token); // a number that only grows per name
lease.check(); // LeaseLost once the grant is lost
await fetch('data:,ok', { signal: lease.signal }); // aborted if the grant is lost
await lease.release();

// withLease releases however the function ends.
const token = await store.withLease('nightly-report', { ttl: '2m' }, async (held) => held.token);

// A second holder is refused, naming the first.
const first = await store.acquire('nightly-report');
try {
  await store.acquire('nightly-report');
} catch (e) {
  if (!(e instanceof Held)) throw e;
  console.log('held by', e.holders[0]?.owner, 'token', e.holders[0]?.token);
}
await first.release();

// A wait ends when its AbortSignal aborts: it leaves the store's queue.
const other = await store.acquire('nightly-report');
const controller = new AbortController();
setTimeout(() => controller.abort(), 100);
await store.acquire('nightly-report', { wait: true, signal: controller.signal }).catch((e: unknown) => {
  console.log('gave up:', (e as Error).name);
});
await other.release();

// The loss of a grant is pushed: whenLost resolves with the LeaseLost.
{
  await using held = await store.acquire('nightly-report', { ttl: '30s' });
  held.whenLost.then((lost: LeaseLost) => console.error(lost.message));
  console.log('held until the block ends:', held.token > token);
}
// A state file written crash-safely, refused once a newer token wrote it.
await store.withLease('nightly-report', async (held) => {
  await writeJson('report.json', { rows: 42 }, { fence: held });
  const counted = await updateJson<{ runs: number }>('runs.json', (old) => ({ runs: (old?.runs ?? 0) + 1 }), { fence: held });
  console.log('runs', counted.runs);
});

// One instance per machine: a flock lock; the file is never changed.
const single = await lock('nightly.lock');
single.release();

// A command under a lease: stopped before the lease could pass on.
const ran = await store.run('nightly-sync', 'sh', ['-c', 'echo synced'], { ttl: '1m', captureOutput: true });
console.log('exit', ran.code, ran.stdout?.toString().trim());

// A task queue (SQLite and PostgreSQL): each task done once, however many workers.
const queue = store.queue('crawl');
await queue.add({ url: 'https://example.com' }, { id: 'example' });
const controller2 = new AbortController();
setTimeout(() => controller2.abort(), 500);
const counts = await queue.worker(async (task) => ({ fetched: (task.payload as { url: string }).url }), {
  concurrency: 4,
  signal: controller2.signal,
});
console.log('tasks done', counts.done);

// Leader election: one leader at a time, each with a newer token.
const leadership = await store.campaign('scheduler', { id: 'node-a', wait: '5s' });
if (leadership) {
  console.log('leading with token', leadership.token);
  await leadership.resign();
}
store.close();
