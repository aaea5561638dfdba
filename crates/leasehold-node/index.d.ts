// Types of the leasehold package (index.js). Checked with `tsc --strict`
// against the examples (examples/*.ts) by scripts/test.

/** A duration: a number of milliseconds, or the CLI's spelling ("90s", "5m", "1h30m"). */
export type Duration = number | string;

/** How long to wait for something held: false (no wait), true (as long as it takes), or up to a duration. */
export type Wait = boolean | Duration;

export interface StoreOptions {
  /** Open a SQLite file on a network filesystem (NFS, SMB…), whose locks may not hold. */
  allowNetworkFs?: boolean;
}

export interface AcquireOptions {
  /** How long the store keeps the grant without a renewal (default 60 s; 1 ms to a year). */
  ttl?: Duration;
  /** Wait for the holders to go (first come, first served); without it, Held at once. */
  wait?: Wait;
  /** A shared grant: true (no limit) or at most this many holders. */
  shared?: boolean | number;
  /** A label for the grant (default host:pid); taking it again with the same owner in this process is idempotent. */
  owner?: string;
  /** How often the grant is renewed (default a third of the TTL). */
  heartbeat?: Duration;
  /** How long before the store could expire the grant this process stops trusting it (default a tenth of the TTL). */
  margin?: Duration;
  /** Ends a wait: it leaves the store's queue and the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** A lease held: its grant's fencing token, kept by heartbeats on the package's threads until released. */
export declare class Lease implements AsyncDisposable {
  private constructor();
  readonly name: string;
  /** The fencing token: a number that only grows per name. */
  readonly token: number;
  /** The grant's identity (16 hex digits), recorded by fenced writes next to the token. */
  readonly grant: string;
  readonly owner: string;
  /** The TTL in milliseconds. */
  readonly ttl: number;
  /** When the store could expire the grant were it not renewed again; null when not held. */
  readonly expiresAt: Date | null;
  /** True once the grant is lost (a renewal refused, or the holder-side deadline passed). */
  readonly lost: boolean;
  /** True while this object holds the grant and it is not lost. */
  readonly held: boolean;
  /** Aborted, with the LeaseLost as its reason, when the grant is lost. */
  readonly signal: AbortSignal;
  /** Resolves with the LeaseLost when the grant is lost; never rejects. */
  readonly whenLost: Promise<LeaseLost>;
  /** Throws LeaseLost once the grant is lost; InvalidInput when it is not held. */
  check(): void;
  /** Renew now (for `ttl` when given, then kept renewing with it). */
  renew(ttl?: Duration): Promise<void>;
  /** Stop renewing and release; rejects with LeaseLost when the grant was lost meanwhile. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** One holder of a name, as Held reports it. */
export interface Holder {
  owner: string;
  token: number;
  mode: 'exclusive' | 'shared';
  expiresAt: Date;
  /** The holder's pid when its grant lives by its process. */
  pid: number | null;
}

/** A name's state, as `leasehold status NAME --json` prints it. */
export interface LeaseState {
  name: string;
  last_token: number;
  waiters: number;
  grants: Array<Record<string, unknown>>;
  [key: string]: unknown;
}

/** A leasehold store, by URL as the CLI's `--store` takes it; none: $LEASEHOLD_STORE, else the CLI's embedded store. */
export declare class Store {
  constructor(url?: string, options?: StoreOptions);
  /** The SQLite store in the file at `path`, named as is. */
  static sqlite(path: string, options?: StoreOptions): Store;
  /** The URL, any password in it replaced by `***`. */
  readonly url: string;
  open(): Promise<void>;
  close(): void;
  /** Acquire `name`; rejects with Held (WaitTimeout after a wait with a limit) when it is held. */
  acquire(name: string, options?: AcquireOptions): Promise<Lease>;
  /** Acquire `name`, run `fn(lease)`, release; rejects with LeaseLost when the grant was lost meanwhile. */
  withLease<T>(name: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withLease<T>(name: string, options: AcquireOptions, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  status(name: string): Promise<LeaseState | null>;
  list(options?: { live?: boolean }): Promise<{ leases: LeaseState[]; [key: string]: unknown }>;
  /** Resolves if `token` may still write for `name`; rejects with StaleToken once a newer grant exists. */
  fence(name: string, token: number): Promise<void>;
}

/** The version of the package and of the `leasehold` command its platform package carries. */
export declare const version: string;

/** Every error the package throws; `code` is stable. */
export declare class LeaseholdError extends Error {
  readonly code: string;
}
/** The name is held (by `holders`). */
export declare class Held extends LeaseholdError {
  readonly code: 'LEASEHOLD_HELD' | 'LEASEHOLD_WAIT_TIMEOUT';
  leaseName: string;
  holders: Holder[];
  waiters: number;
}
/** Still held after a wait with a limit. */
export declare class WaitTimeout extends Held {
  readonly code: 'LEASEHOLD_WAIT_TIMEOUT';
}
/** The grant (or claim) is gone: stop using what it protects. */
export declare class LeaseLost extends LeaseholdError {
  readonly code: 'LEASEHOLD_LOST';
}
/** A fencing token was refused: a newer one has written. */
export declare class StaleToken extends LeaseholdError {
  readonly code: 'LEASEHOLD_STALE_TOKEN';
}
/** The store cannot be used right now (down, unreachable); nothing known to be changed. */
export declare class StoreUnavailable extends LeaseholdError {
  readonly code: 'LEASEHOLD_STORE_UNAVAILABLE' | 'LEASEHOLD_STORE_BUSY';
}
/** The store is locked by another writer for longer than the call waits; retry. */
export declare class StoreBusy extends StoreUnavailable {
  readonly code: 'LEASEHOLD_STORE_BUSY';
}
/** The store's data is damaged or not a leasehold store: left exactly as found. */
export declare class BadData extends LeaseholdError {
  readonly code: 'LEASEHOLD_BAD_DATA';
}
export declare class DiskFull extends LeaseholdError {
  readonly code: 'LEASEHOLD_DISK_FULL';
}
export declare class ReadOnly extends LeaseholdError {
  readonly code: 'LEASEHOLD_READ_ONLY';
}
export declare class PermissionDenied extends LeaseholdError {
  readonly code: 'LEASEHOLD_PERMISSION_DENIED';
}
export declare class AuthFailed extends LeaseholdError {
  readonly code: 'LEASEHOLD_AUTH_FAILED';
}
export declare class Unsupported extends LeaseholdError {
  readonly code: 'LEASEHOLD_UNSUPPORTED';
}
/** An argument refused before anything was done. */
export declare class InvalidInput extends LeaseholdError {
  readonly code: 'LEASEHOLD_INVALID_INPUT' | 'LEASEHOLD_INVALID_NAME';
}
export declare class InvalidName extends InvalidInput {
  readonly code: 'LEASEHOLD_INVALID_NAME';
}
export declare class Failed extends LeaseholdError {
  readonly code: 'LEASEHOLD_FAILED' | 'LEASEHOLD_STALLED';
}
/** A command stopped for making no progress. */
export declare class Stalled extends Failed {
  readonly code: 'LEASEHOLD_STALLED';
}
export declare class NothingToClaim extends LeaseholdError {
  readonly code: 'LEASEHOLD_NOTHING_TO_CLAIM';
}
export declare class NoSuchTask extends LeaseholdError {
  readonly code: 'LEASEHOLD_NO_SUCH_TASK';
}
