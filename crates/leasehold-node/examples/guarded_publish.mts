// Seed 001's guarded publish in TypeScript: the original kept a lease
// document (owner, expires_at, fencing) in Firestore, renewed it from a
// thread that exited the process on a failed renewal, and gated the push
// on a second document holding the highest fencing token. Here the lease,
// its heartbeat and its token are leasehold's, and the gate is a fenced
// state file: an older token is refused (StaleToken) before the write.
import { Held, Store, writeJson, type Lease } from 'leasehold';

const LEASE_TTL = '90s'; // longer than one dangerous step, shorter than a stale run
const HEARTBEAT = '30s'; // about a third of the TTL

/** Run `doWrite` only while `lease` is held and its token is not stale. */
export async function guardedPublish(lease: Lease, gate: string, doWrite: () => Promise<void>): Promise<void> {
  lease.check(); // LeaseLost if the heartbeat lost the grant
  await writeJson(gate, { fencing: lease.token }, { fence: lease });
  await doWrite();
}

/** One agent run: the token it published with, or null if another run holds the repository. */
export async function run(store: Store, gate: string, publish: (token: number) => Promise<void>): Promise<number | null> {
  try {
    return await store.withLease('gemilab-repo', { ttl: LEASE_TTL, heartbeat: HEARTBEAT }, async (lease) => {
      // cloneRepo(); writeArticle(repo) — the work under the lease.
      await guardedPublish(lease, gate, () => publish(lease.token));
      return lease.token;
    });
  } catch (e) {
    if (!(e instanceof Held)) throw e;
    console.log('another run holds the repository; skipping this time');
    return null;
  }
}

const store = new Store();
const token = await run(store, 'publish-gate.json', async (t) => console.log('published with token', t));
console.log('token', token);
store.close();
