// Leader election on a lease (store.campaign) and who leads (store.observe):
// the library's, waited for on the package's threads. A leadership won is
// kept by heartbeats on the package's threads until resigned; a Worker or
// process that ends leading resigns.
'use strict';
const native = require('./native.js');
const errors = require('./errors.js');
const { NATIVE, asyncDispose, sync, call, cancellable, options, name, lossHub } = require('./common.js');

const { InvalidInput } = errors.classes;

const CAMPAIGN = { id: 'string', ttl: 'duration', wait: 'wait', signal: 'signal' };

/**
 * Leadership of a lease name, won by `store.campaign()`: `isLeader` while
 * this process may act as the leader, `token` for what the leader writes,
 * `lost`/`signal`/`whenLost` as a Lease's, `resign()` to let the next
 * candidate lead at once (`await using`: resigned at the block's end).
 */
class Leadership {
  #native;
  #hub;

  /** @internal Made by `store.campaign`. */
  constructor(nativeLeadership, hub) {
    this.#native = nativeLeadership;
    this.#hub = hub;
  }

  get name() {
    return this.#native.name;
  }

  /** The fencing token to pass to what the leader writes. */
  get token() {
    return sync(() => this.#native.token);
  }

  /** True while this process may act as the leader: false once lost (checked now) or resigned. */
  get isLeader() {
    return this.#hub.error === null && this.#native.isLeader;
  }

  /** True once leadership is lost (a refused renewal, or a trust window that closed). */
  get lost() {
    return this.#hub.error !== null || this.#native.lost;
  }

  /** True once resigned. */
  get resigned() {
    return this.#native.resigned;
  }

  /** Aborted, with the LeaseLost as its reason, when leadership is lost. */
  get signal() {
    return this.#hub.signal;
  }

  /** Resolves with the LeaseLost when leadership is lost; never rejects. */
  get whenLost() {
    return this.#hub.whenLost;
  }

  /** Stop leading: stop renewing and release, so the next candidate leads at once. Twice is fine. */
  resign() {
    return call(() => this.#native.resign());
  }

  [asyncDispose]() {
    return this.resign();
  }

  toString() {
    return `Leadership(${JSON.stringify(this.name)}, token ${this.#native.token})`;
  }
}

/**
 * Campaign for `leaseName` as candidate `id` (stable across the
 * candidate's restarts, unique among live candidates): resolves with a
 * Leadership once this candidate leads — first come, first served — or
 * null when `wait` passed first (default: as long as it takes; false: one
 * try). `signal` ends the wait (out of the queue); the promise rejects
 * with its reason.
 */
async function campaign(store, leaseName, opts) {
  name(leaseName, 'campaign');
  const { signal, ...args } = options(opts, CAMPAIGN, 'campaign');
  if (!args.id) {
    throw new InvalidInput(
      'campaign: { id } is required: a candidate id stable across restarts and unique among live candidates',
    );
  }
  const hub = lossHub();
  const won = await cancellable(signal, (cancel) =>
    store[NATIVE].campaign(leaseName, args, cancel, (message) => hub.fire(message)),
  );
  if (won === null || won === undefined) {
    if (signal?.aborted) throw signal.reason;
    return null;
  }
  const leadership = new Leadership(won, hub);
  if (signal?.aborted) {
    // Won as the abort came: nobody wants it now.
    await leadership.resign().catch(() => {});
    throw signal.reason;
  }
  return leadership;
}

/**
 * Who leads a lease name, change by change (`for await (const change of
 * store.observe(name))`), the first the current state: `{ name, leader }`,
 * `leader` null or `{ owner, token, host, pid, since }` — the document
 * `leasehold --json leader NAME` prints. Never the same leader twice in a
 * row. Ends when `signal` aborts or the loop is left (`return()`), at
 * most the store's poll interval (100 ms) later.
 */
class Observer {
  #native;
  #signal;
  #onAbort = () => this.close();
  #done = false;

  /** @internal Made by `store.observe`. */
  constructor(nativeObserver, signal) {
    this.#native = nativeObserver;
    this.#signal = signal;
    if (signal?.aborted) this.close();
    else signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** The next change, waited for on a thread of the package's. */
  async next() {
    if (this.#done) return { done: true, value: undefined };
    const text = await call(() => this.#native.next());
    if (text === null || text === undefined) {
      this.close();
      return { done: true, value: undefined };
    }
    return { done: false, value: JSON.parse(text) };
  }

  async return() {
    this.close();
    return { done: true, value: undefined };
  }

  /** End the iteration: a waiting `next()` ends at its next look. */
  close() {
    this.#done = true;
    this.#native.close();
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }
}

function observe(store, leaseName, opts) {
  name(leaseName, 'observe');
  const { signal } = options(opts, { signal: 'signal' }, 'observe');
  return new Observer(sync(() => store[NATIVE].observe(leaseName)), signal);
}

module.exports = { Leadership, Observer, campaign, observe };
