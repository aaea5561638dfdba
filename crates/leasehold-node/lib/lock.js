// File locks: flock(2) on the same lock file as `leasehold lock PATH` and
// Python's lh.lock(PATH), so all three exclude one another. A file the
// lock did not create is never changed (its content, mode and times), so
// a data file, a config or the script itself may be the lock.
'use strict';
const native = require('./native.js');
const errors = require('./errors.js');
const { asyncDispose, dispose, sync, options, path, cancellable } = require('./common.js');

const LOCK = { wait: 'wait', shared: 'boolean', dir: 'boolean', allowNetworkFs: 'boolean', signal: 'signal' };

// This program's held locks (native halves, weakly), for the writes that
// would wait for one of them (lib/files.js).
const held = new Set();

/**
 * A held `flock` lock. `release()` it, or `await using lock = await
 * lock(path)`; the kernel releases it when the process dies, and the
 * package when a Worker holding it ends or the object is collected.
 */
class FileLock {
  #native;

  /** @internal Made by `lock()`. */
  constructor(nativeLock) {
    this.#native = nativeLock;
  }

  /** The lock file (inside the directory, for a directory). */
  get path() {
    return this.#native.path;
  }

  get shared() {
    return this.#native.shared;
  }

  /** True until released. */
  get locked() {
    return this.#native.locked;
  }

  /** Unlock (at once: it never waits). The lock file stays, so no second process can lock a new file of its name. */
  release() {
    sync(() => this.#native.release(false));
  }

  /** `using lock = await lock(path)`: released at the block's end (fine if released already). */
  [dispose]() {
    sync(() => this.#native.release(true));
  }

  /** `await using lock = await lock(path)`: as `using`. */
  async [asyncDispose]() {
    this[dispose]();
  }

  toString() {
    return `FileLock(${JSON.stringify(this.path)}, ${this.shared ? 'shared, ' : ''}${this.locked ? 'locked' : 'released'})`;
  }
}

/**
 * Take flock(2) on `path` — the lock of `leasehold lock PATH`. A path
 * ending in `/` (or `{ dir: true }`) is a directory, made if missing
 * (0700), locked through `.leasehold.lock` inside; an existing directory
 * likewise; any other path is the lock file itself, in a directory that
 * must exist. Rejects with Held naming the holder's pid — after `wait`
 * (ms, a duration string, or true: as long as it takes) with WaitTimeout.
 * `signal` ends a wait: the promise rejects with its reason.
 */
async function lock(lockPath, opts) {
  const given = path(lockPath, 'lock');
  const { signal, ...args } = options(opts, LOCK, 'lock');
  const outcome = await cancellable(signal, (cancel) => native.NativeFileLock.lock(given, args, cancel));
  if (!(outcome instanceof native.NativeFileLock)) {
    if (signal?.aborted) throw signal.reason;
    throw errors.held(outcome, 'path');
  }
  held.add(new WeakRef(outcome));
  const fileLock = new FileLock(outcome);
  if (signal?.aborted) {
    // Locked as the abort came: nobody wants it now.
    fileLock[dispose]();
    throw signal.reason;
  }
  return fileLock;
}

/** @internal The lock files (`DEV:INO`) this program's FileLocks hold. */
function heldKeys() {
  const keys = [];
  for (const ref of held) {
    const nativeLock = ref.deref();
    if (nativeLock?.locked) keys.push(nativeLock.key);
    else held.delete(ref);
  }
  return keys;
}

module.exports = { FileLock, lock, heldKeys };
