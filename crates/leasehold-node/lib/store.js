// Store and Lease: leases with fencing tokens, kept by the package's
// threads. Every call that can block runs on them and settles a promise.
'use strict';
const native = require('./native.js');
const errors = require('./errors.js');
const { NATIVE, asyncDispose, sync, call, is, spelled, options, cancellable, name, lossHub, Kept } = require('./common.js');

const { InvalidInput } = errors.classes;

const ACQUIRE = {
  ttl: 'duration',
  wait: 'wait',
  shared: 'shared',
  owner: 'string',
  heartbeat: 'duration',
  margin: 'duration',
  signal: 'signal',
};

/**
 * A lease held: its grant's fencing token, kept by heartbeats on the
 * package's threads until released. Bound to this process: if it dies,
 * the next acquirer on this host takes over at once.
 */
class Lease extends Kept {
  #native;

  /** @internal Made by `store.acquire`. */
  constructor(nativeLease, hub) {
    super(nativeLease, hub);
    this.#native = nativeLease;
  }

  get name() {
    return this.#native.name;
  }

  /** The fencing token: a number that only grows per name. */
  get token() {
    return sync(() => this.#native.token);
  }

  /** The grant's identity (16 hex digits), recorded by fenced writes. */
  get grant() {
    return this.#native.grant;
  }

  get owner() {
    return this.#native.owner;
  }

  /** The TTL in milliseconds. */
  get ttl() {
    return this.#native.ttlMs;
  }

  /** When the store could expire the grant were it not renewed again; null when not held. */
  get expiresAt() {
    const ms = this.#native.expiresAt;
    return ms === null || ms === undefined ? null : new Date(ms);
  }

  /** True while this object holds the grant and it is not lost. */
  get held() {
    return this.#native.held;
  }

  /** Renew now (for `ttl` when given, then kept renewing with it). Rejects with LeaseLost when the store refused. */
  renew(ttl) {
    if (ttl !== undefined && !is.duration(ttl)) {
      return Promise.reject(new InvalidInput(`renew: ttl must be ${spelled.duration}`));
    }
    return call(() => this.#native.renew(ttl));
  }

  /** Stop renewing and release. Rejects with LeaseLost when the grant was lost meanwhile. */
  release() {
    return call(() => this.#native.release(false));
  }

  /** `await using lease = await store.acquire(...)`: released at the block's end (fine if released already). */
  [asyncDispose]() {
    return call(() => this.#native.release(true));
  }

  toString() {
    return `Lease(${JSON.stringify(this.name)}, token ${this.#native.token})`;
  }
}

/** `Store.sqlite(path)`'s argument to the constructor. */
class SqliteFile {
  constructor(path) {
    this.path = path;
  }
}

/**
 * A leasehold store, by URL as the CLI's `--store` takes it:
 * `sqlite:///path/to/leasehold.db`, `postgres://…`, `etcd://…`,
 * `firestore://…`, `redis://…`; none: $LEASEHOLD_STORE, else the CLI's
 * embedded store — so a program and `leasehold` on the command line share
 * their leases. Opened on first use.
 */
class Store {
  #native;

  constructor(url, opts) {
    const file = url instanceof SqliteFile ? url.path : undefined;
    if (file === undefined && url !== undefined && url !== null && typeof url !== 'string') {
      throw new InvalidInput(`new Store: the URL must be a string (or undefined), not ${typeof url}`);
    }
    const o = options(opts, { allowNetworkFs: 'boolean' }, 'new Store');
    const given = file === undefined ? (url ?? undefined) : undefined;
    this.#native = sync(() => new native.NativeStore(given, file, o.allowNetworkFs));
  }

  /** The SQLite store in the file at `path`, named as is (a `?` or `#` in it included). */
  static sqlite(path, opts) {
    if (typeof path !== 'string') throw new InvalidInput('Store.sqlite: the path must be a string');
    return new Store(new SqliteFile(path), opts);
  }

  /** @internal The native store, for the package's other modules. */
  get [NATIVE]() {
    return this.#native;
  }

  /** The URL, any password in it replaced by `***`. */
  get url() {
    return this.#native.url;
  }

  /** Open now (calls open the store when first used). */
  open() {
    return call(() => this.#native.open());
  }

  /** Later calls are refused; leases held keep their own handle until released. */
  close() {
    this.#native.close();
  }

  /**
   * Acquire `name`. Rejects with Held (who holds it, as `holders`) when it
   * is held — after `wait` (ms, a duration string, or true: as long as it
   * takes) with WaitTimeout. `signal` ends a wait: it leaves the store's
   * queue, and the promise rejects with the signal's reason.
   */
  async acquire(leaseName, opts) {
    name(leaseName, 'acquire');
    const { signal, ...args } = options(opts, ACQUIRE, 'acquire');
    const hub = lossHub();
    const outcome = await cancellable(
      signal,
      (cancel) => this.#native.acquire(leaseName, args, cancel, (message) => hub.fire(message)),
      (got) => got instanceof native.NativeLease && got.release(true),
    );
    if (!(outcome instanceof native.NativeLease)) throw errors.held(outcome);
    return new Lease(outcome, hub);
  }

  /**
   * Acquire `name`, run `fn(lease)`, release. Resolves with what `fn`
   * returns; rejects with what it throws, or with LeaseLost when the
   * grant was lost meanwhile (what was done under it may have overlapped
   * a newer holder).
   */
  async withLease(leaseName, opts, fn) {
    if (typeof opts === 'function') [opts, fn] = [undefined, opts];
    if (typeof fn !== 'function') throw new InvalidInput('withLease: the last argument must be a function');
    const lease = await this.acquire(leaseName, opts);
    let result;
    try {
      result = await fn(lease);
    } catch (e) {
      await lease[asyncDispose]().catch(() => {});
      throw e;
    }
    await lease[asyncDispose]();
    return result;
  }

  /** `name`'s state as `leasehold status NAME --json` prints it, or null for a name never granted. */
  async status(leaseName) {
    name(leaseName, 'status');
    const text = await call(() => this.#native.status(leaseName));
    return text === null || text === undefined ? null : JSON.parse(text);
  }

  /** Every name's state, as `leasehold list --json` prints it (`live`: only names held now). */
  async list(opts) {
    const o = options(opts, { live: 'boolean' }, 'list');
    return JSON.parse(await call(() => this.#native.list(o.live)));
  }

  /** Resolves if `token` may still write for `name`; rejects with StaleToken once a newer grant exists. */
  fence(leaseName, token) {
    name(leaseName, 'fence');
    if (typeof token !== 'number') return Promise.reject(new InvalidInput('fence: the token must be a number'));
    return call(() => this.#native.fence(leaseName, token));
  }

  toString() {
    return `Store(${JSON.stringify(this.url)})`;
  }

  /** `command` with `args` under the lease `leaseName` (lib/run.js): `{ code, signal, stdout, stderr }`. */
  run(leaseName, command, args, opts) {
    return require('./run.js').run(this, leaseName, command, args, opts);
  }

  /** Campaign for leadership of `leaseName` as `{ id }` (lib/leadership.js): a Leadership, or null. */
  campaign(leaseName, opts) {
    return require('./leadership.js').campaign(this, leaseName, opts);
  }

  /** Who leads `leaseName`, change by change: `for await (const change of store.observe(name))`. */
  observe(leaseName, opts) {
    return require('./leadership.js').observe(this, leaseName, opts);
  }

  /** The task queue `queueName` (lib/queue.js). InvalidName at once for a bad name. */
  queue(queueName) {
    return new (require('./queue.js').Queue)(this, queueName);
  }
}

module.exports = { Store, Lease };
