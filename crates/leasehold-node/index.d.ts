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
  /** null for a lock's holder. */
  token: number | null;
  mode: 'exclusive' | 'shared';
  /** null for a lock's holder. */
  expiresAt: Date | null;
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
  /**
   * Run `command` under a lease on `name`: the command is stopped (SIGTERM,
   * then SIGKILL after `grace`) before the lease could pass on. Rejects with
   * Held/WaitTimeout, LeaseLost, Stalled, RunTimeout or Failed.
   */
  run(name: string, command: string, args?: string[], options?: RunOptions): Promise<RunResult>;
  run(name: string, command: string, options?: RunOptions): Promise<RunResult>;
  /** Wait to lead `name`; null when `wait` ran out first. */
  campaign(name: string, options: CampaignOptions): Promise<Leadership | null>;
  /** Who leads `name`, change by change. */
  observe(name: string, options?: { signal?: AbortSignal }): Observer;
  /** The task queue `name` (SQLite and PostgreSQL keep queues; other stores refuse with Unsupported). */
  queue(name: string): Queue;
}

export interface AddOptions {
  /** An id of the caller's (adding it again is idempotent). */
  id?: string;
  /** Higher first. */
  priority?: number;
  /** Claimable after this long. */
  delay?: Duration;
  /** Claimable from this moment. */
  at?: Date;
  maxAttempts?: number;
}

export interface ClaimOptions {
  ttl?: Duration;
  /** Wait for a task; without it, NothingToClaim at once. */
  wait?: Wait;
  owner?: string;
  heartbeat?: Duration;
  margin?: Duration;
  /** Ends the wait; a claim that came as the abort did is handed back. */
  signal?: AbortSignal;
}

export interface WorkerCounts {
  done: number;
  failed: number;
  dead: number;
  lost: number;
  released: number;
}

/** A task queue of a store. */
export declare class Queue {
  private constructor();
  readonly name: string;
  /** Add a task with a JSON payload; resolves with its id. */
  add(payload: unknown, options?: AddOptions): Promise<string>;
  /** Claim the next task, kept by heartbeats until reported. */
  claim(options?: ClaimOptions): Promise<Task>;
  /** The task as `leasehold task show --json` prints it, or null. */
  get(id: string): Promise<Record<string, unknown> | null>;
  /**
   * Claim and run tasks, up to `concurrency` at once: done with what `fn`
   * returns, failed with what it throws; resolves once the signal aborts
   * (or, with `wait: false`, the queue is empty) and the tasks in flight settled.
   */
  worker(fn: (task: Task) => unknown, options?: ClaimOptions & { concurrency?: number }): Promise<WorkerCounts>;
}

/** A claimed task, kept by heartbeats until it is reported once. */
export declare class Task implements AsyncDisposable {
  private constructor();
  readonly id: string;
  readonly queue: string;
  readonly payload: unknown;
  /** The claim's fencing token. */
  readonly token: number;
  /** This claim's attempt number. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** How it was reported, once it was. */
  readonly outcome: string | null;
  readonly lost: boolean;
  readonly signal: AbortSignal;
  readonly whenLost: Promise<LeaseLost>;
  check(): void;
  /** Done, with `result` recorded; rejects with LeaseLost when the claim was lost. */
  done(result?: unknown): Promise<void>;
  /** A failed attempt: retried with backoff, or dead once its attempts are used up. */
  fail(error: unknown, options?: { retry?: boolean; retryIn?: Duration }): Promise<'retrying' | 'dead'>;
  /** Hand the claim back without charging the attempt. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface RunOptions {
  ttl?: Duration;
  heartbeat?: Duration;
  /** Between SIGTERM and SIGKILL. */
  grace?: Duration;
  wait?: Wait;
  shared?: boolean | number;
  owner?: string;
  /** Stop the command when `progressFile` has not changed for this long (Stalled). */
  stallTimeout?: Duration;
  progressFile?: string;
  /** Added to this process's environment. */
  env?: Record<string, string>;
  cwd?: string;
  /** Written to the command's stdin. */
  input?: string | Uint8Array;
  /** Collect stdout and stderr as Buffers. */
  captureOutput?: boolean;
  /** From the command's start; then RunTimeout. */
  timeout?: Duration;
  /** Ends the wait, or stops the command; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface RunResult {
  /** The exit code; 128+N when signal N ended the command. */
  code: number;
  /** The signal that ended the command ('SIGTERM'), or null. */
  signal: string | null;
  stdout: Buffer | null;
  stderr: Buffer | null;
}

export interface CampaignOptions {
  /** A candidate id stable across restarts and unique among live candidates. */
  id: string;
  ttl?: Duration;
  /** Default: as long as it takes; false: one try. */
  wait?: Wait;
  signal?: AbortSignal;
}

/** Leadership of a name, won by `store.campaign()`. */
export declare class Leadership implements AsyncDisposable {
  private constructor();
  readonly name: string;
  readonly token: number;
  /** True while this process may act as the leader. */
  readonly isLeader: boolean;
  readonly lost: boolean;
  readonly resigned: boolean;
  readonly signal: AbortSignal;
  readonly whenLost: Promise<LeaseLost>;
  /** Let the next candidate lead at once. */
  resign(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A leader change, as `leasehold --json leader` prints it. */
export interface LeaderChange {
  name: string;
  leader: Record<string, unknown> | null;
  [key: string]: unknown;
}

/** `for await (const change of store.observe(name))`. */
export declare class Observer implements AsyncIterableIterator<LeaderChange> {
  private constructor();
  next(): Promise<IteratorResult<LeaderChange>>;
  return(): Promise<IteratorResult<LeaderChange>>;
  close(): void;
  [Symbol.asyncIterator](): Observer;
}

/** A fence for a state-file write: a Lease, anything with a `token` (and a `grant`), or a token. */
export type Fence = Lease | Leadership | Task | { token: number; grant?: string } | number;

export interface WriteOptions {
  /** Refused (StaleToken) when a newer token has written the file. */
  fence?: Fence;
  /** With a plain token: the lease it is a token of. */
  fenceLease?: string;
  /** Let a token of another lease than the file's record write it. */
  fenceNewLease?: boolean;
  /** The file's permission bits when it is created (default 0o600). */
  mode?: number;
}

/** Write `data` to `path` crash-safely (a temp file, fsync, rename): readers see the old or the new bytes, never a part. */
export declare function writeFile(path: string | URL, data: string | ArrayBufferView, options?: WriteOptions): Promise<void>;
/** Write `value` as JSON, as writeFile. NaN, Infinity, BigInt and cycles are refused. */
export declare function writeJson(path: string | URL, value: unknown, options?: WriteOptions): Promise<void>;
/** Read, change with `fn` (it may be async), write — under the file's lock; resolves with what was written. */
export declare function updateJson<T = unknown>(
  path: string | URL,
  fn: (value: T | undefined) => T | Promise<T>,
  options?: WriteOptions & { default?: T },
): Promise<T>;

export interface LockOptions {
  wait?: Wait;
  shared?: boolean;
  /** Lock a directory (made private when missing). */
  dir?: boolean;
  allowNetworkFs?: boolean;
  signal?: AbortSignal;
}

/** A held `flock` lock; the file is never changed. */
export declare class FileLock implements AsyncDisposable, Disposable {
  private constructor();
  readonly path: string;
  readonly shared: boolean;
  readonly locked: boolean;
  release(): void;
  [Symbol.asyncDispose](): Promise<void>;
  [Symbol.dispose](): void;
}

/** Lock `path` with flock; Held (naming the holder's pid) when held. */
export declare function lock(path: string | URL, options?: LockOptions): Promise<FileLock>;

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
  /** A lock's path, when a lock is held. */
  path?: string;
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
  readonly code: 'LEASEHOLD_FAILED' | 'LEASEHOLD_STALLED' | 'LEASEHOLD_RUN_TIMEOUT';
}
/** store.run's timeout stopped the command (`timeout`, and the output so far when captured). */
export declare class RunTimeout extends Failed {
  readonly code: 'LEASEHOLD_RUN_TIMEOUT';
  timeout: number;
  stdout?: Buffer | null;
  stderr?: Buffer | null;
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
