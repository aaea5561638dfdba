// What the package's modules share: calls whose errors are the
// package's, the options checker, the loss hub of a hold.
'use strict';
const { fileURLToPath } = require('node:url');
const native = require('./native.js');
const { translate, classes } = require('./errors.js');

const { InvalidInput, InvalidName, LeaseLost } = classes;

// Node 20 has Symbol.asyncDispose (for `await using`, TypeScript 5.2+);
// Node's own polyfill key otherwise.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');
const dispose = Symbol.dispose ?? Symbol.for('nodejs.dispose');

// A Store's native half, for the package's other modules (queue, files,
// run, leadership): `store[NATIVE]`. Not exported from the package.
const NATIVE = Symbol('leasehold.native');

/** `f()`'s result, its errors the package's. */
function sync(f) {
  try {
    return f();
  } catch (e) {
    throw translate(e);
  }
}

/** `await f()`, its errors (thrown or rejected) the package's. */
async function call(f) {
  try {
    return await f();
  } catch (e) {
    throw translate(e);
  }
}

/**
 * `await f()`, its errors the package's, with `stop()` called if `signal`
 * aborts meanwhile (a wait's cancel, a run's stop); refused at once with
 * the signal's reason when it aborted already.
 */
async function abortable(signal, stop, f) {
  signal?.throwIfAborted();
  signal?.addEventListener('abort', stop, { once: true });
  try {
    return await call(f);
  } finally {
    signal?.removeEventListener('abort', stop);
  }
}

const is = {
  duration: (v) => typeof v === 'number' || typeof v === 'string',
  wait: (v) => typeof v === 'boolean' || typeof v === 'number' || typeof v === 'string',
  shared: (v) => typeof v === 'boolean' || typeof v === 'number',
  string: (v) => typeof v === 'string',
  boolean: (v) => typeof v === 'boolean',
  number: (v) => typeof v === 'number',
  date: (v) => v instanceof Date,
  signal: (v) => v instanceof AbortSignal,
  function: (v) => typeof v === 'function',
  any: () => true,
};
const spelled = {
  duration: 'a number of milliseconds or a duration string ("90s", "5m")',
  wait: 'false (no wait), true (for as long as it takes), or a number of milliseconds or a duration string',
  shared: 'true (shared, no limit) or a whole number (shared, at most that many holders)',
  string: 'a string',
  boolean: 'a boolean',
  number: 'a number',
  date: 'a Date',
  signal: 'an AbortSignal',
  function: 'a function',
};

/**
 * The options object of `what`, checked against `allowed` (key → kind):
 * an unknown key (a typo: `{ wiat: 5000 }`) or a value of the wrong kind
 * is refused with InvalidInput, naming it, before anything is done.
 * `undefined` values are left out.
 */
function options(given, allowed, what) {
  if (given === undefined || given === null) return {};
  if (typeof given !== 'object' || Array.isArray(given)) {
    throw new InvalidInput(`${what}: the options must be an object, not ${Array.isArray(given) ? 'an array' : typeof given}`);
  }
  const out = {};
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(allowed, key)) {
      throw new InvalidInput(`${what}: unknown option ${JSON.stringify(key)}; the options are ${Object.keys(allowed).join(', ')}`);
    }
    if (value === undefined) continue;
    const kind = allowed[key];
    if (!is[kind](value)) {
      throw new InvalidInput(`${what}: ${key} must be ${spelled[kind]}, not ${shown(value)}`);
    }
    out[key] = value;
  }
  return out;
}

/** A value as a message shows it: its JSON, else its type (a BigInt, a function, a cycle). */
function shown(value) {
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}

/** A path argument: a string, or a `file:` URL (as `fs` takes them). */
function path(value, what) {
  if (typeof value === 'string') return value;
  if (value instanceof URL) {
    if (value.protocol === 'file:') return fileURLToPath(value);
    throw new InvalidInput(`${what}: the path must be a file: URL, not ${value.protocol} (${value.href})`);
  }
  throw new InvalidInput(`${what}: the path must be a string or a file: URL, not ${shown(value)}`);
}

/**
 * `start(cancel)`'s promise (a native call that may wait), `cancel` a
 * NativeCancel that `signal`'s abort cancels. With `letGo`: once aborted,
 * the promise rejects with the signal's reason, and what was got anyway,
 * as the abort came, is handed to `letGo` (nobody wants it now).
 */
async function cancellable(signal, start, letGo) {
  const cancel = new native.NativeCancel();
  let got;
  try {
    got = await abortable(signal, () => cancel.cancel(), () => start(cancel));
  } catch (e) {
    throw letGo && signal?.aborted ? signal.reason : e;
  }
  if (letGo && signal?.aborted) {
    await call(() => letGo(got)).catch(() => {});
    throw signal.reason;
  }
  return got;
}

function name(value, what) {
  if (typeof value !== 'string') {
    throw new InvalidName(`${what}: the name must be a string, not ${typeof value}`);
  }
  return value;
}

/**
 * Where a hold's loss arrives from the keeper's thread (before the Lease
 * object may exist): `lost` once lost, `signal` aborted with the
 * LeaseLost, `whenLost` resolved with it.
 */
function lossHub() {
  const controller = new AbortController();
  let resolve;
  const hub = {
    error: null,
    signal: controller.signal,
    whenLost: new Promise((r) => {
      resolve = r;
    }),
    fire(message) {
      if (hub.error) return;
      hub.error = new LeaseLost(message);
      controller.abort(hub.error);
      resolve(hub.error);
    },
  };
  return hub;
}

/**
 * What a hold kept by heartbeats (a lease's grant, a task's claim) shows
 * of its loss, from its native half and its loss hub: `lost`, `signal`,
 * `whenLost`, `check()`. Lease and Task extend it.
 */
class Kept {
  #native;
  #hub;

  constructor(nativeHold, hub) {
    this.#native = nativeHold;
    this.#hub = hub;
  }

  /** True once it is lost (a renewal refused, or the holder-side deadline passed). */
  get lost() {
    return this.#hub.error !== null || this.#native.lost;
  }

  /** Aborted, with the LeaseLost as its reason, when it is lost: pass it to fetch, child_process, timers. */
  get signal() {
    return this.#hub.signal;
  }

  /** Resolves with the LeaseLost when it is lost; never rejects. */
  get whenLost() {
    return this.#hub.whenLost;
  }

  /** Throws LeaseLost once it is lost (a task's claim: or has ended; a lease not held: InvalidInput). */
  check() {
    sync(() => this.#native.check());
  }
}

module.exports = {
  NATIVE,
  asyncDispose,
  dispose,
  sync,
  call,
  is,
  spelled,
  options,
  shown,
  path,
  abortable,
  cancellable,
  name,
  lossHub,
  Kept,
};
