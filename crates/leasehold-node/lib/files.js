// Crash-safe state files, as Python's write_atomic, write_json and
// update_json: temp file in the same directory, fsync, rename, fsync of
// the directory — a crash or a reader sees the old content or the new,
// never a mix — under the sidecar FILE.lock (the lock of `leasehold
// write`), fenced by a lease's token when asked (FILE.fence). The native
// half (src/files.rs) does the I/O on the package's threads.
'use strict';
const { AsyncLocalStorage } = require('node:async_hooks');
const native = require('./native.js');
const { classes } = require('./errors.js');
const { sync, call, options, shown, path } = require('./common.js');
const { Lease } = require('./store.js');
const { heldKeys } = require('./lock.js');

const { InvalidInput } = classes;

const WRITE = { fence: 'any', fenceLease: 'string', fenceNewLease: 'boolean', mode: 'number' };
const UPDATE = { ...WRITE, default: 'any' };

// The lock files (DEV:INO) of the updates whose function runs in this
// async context: a write of the same file there would wait for itself.
const updating = new AsyncLocalStorage();

/** `{ fence }`: a Lease (its token, grant and name), a task or any object with a `token` (and a `grant`), or a token. */
function fenceOf(value, what) {
  if (value instanceof Lease) return { token: value.token, grant: value.grant, lease: value.name, plain: false };
  if (typeof value === 'number') return { token: value, plain: true };
  const grant = value?.grant ?? undefined;
  if (typeof value === 'object' && typeof value.token === 'number' && (grant === undefined || typeof grant === 'string')) {
    return { token: value.token, grant, plain: false };
  }
  throw new InvalidInput(`${what}: fence must be a Lease, a task or a fencing token (a number), not ${shown(value)}`);
}

/** The native options of a write: the fence read, and the locks this program holds. */
function writeArgs(o, what) {
  return {
    fence: o.fence === null || o.fence === undefined ? undefined : fenceOf(o.fence, what),
    fenceLease: o.fenceLease,
    fenceNewLease: o.fenceNewLease,
    mode: o.mode,
    updating: updating.getStore() ?? [],
    locks: heldKeys(),
  };
}

/** `value` as JSON text with a newline; refused (InvalidInput) where JSON.stringify would drop or change it. */
function jsonOf(value, what) {
  let text;
  try {
    text = JSON.stringify(value, (key, v) => {
      if (typeof v === 'number' && !Number.isFinite(v)) {
        throw new InvalidInput(`${what}: ${v}${key ? ` (at key ${JSON.stringify(key)})` : ''} is not JSON`);
      }
      return v;
    });
  } catch (e) {
    if (e instanceof InvalidInput) throw e;
    throw new InvalidInput(`${what}: the value is not JSON: ${e.message}`);
  }
  if (text === undefined) throw new InvalidInput(`${what}: ${typeof value} is not JSON`);
  return `${text}\n`;
}

/**
 * Replace the file at `path` with `data` (a string, as UTF-8, or bytes),
 * atomically and durably: a crash leaves the old or the new content.
 * `fence` (a Lease, a task, or a token): refused with StaleToken once a
 * newer token has written — the token and grant are kept in PATH.fence.
 * `mode`: the permission bits (default: the old file's, else 0o644 less
 * the umask).
 */
async function writeFile(file, data, opts) {
  const given = path(file, 'writeFile');
  let bytes;
  if (typeof data === 'string') bytes = Buffer.from(data, 'utf8');
  else if (ArrayBuffer.isView(data)) bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  else {
    throw new InvalidInput(
      `writeFile: data must be a string, a Buffer, a TypedArray or a DataView (for a JSON value use writeJson), not ${shown(data)}`,
    );
  }
  await replace('writeFile', given, bytes, opts);
}

/** `writeFile` of `value` as JSON; `fence` and `mode` as for writeFile. */
async function writeJson(file, value, opts) {
  const given = path(file, 'writeJson');
  const text = jsonOf(value, 'writeJson');
  await replace('writeJson', given, Buffer.from(text, 'utf8'), opts);
}

/** The write of `what`: the file at `given` replaced with `bytes` (JSON for writeJson). */
async function replace(what, given, bytes, opts) {
  const args = writeArgs(options(opts, WRITE, what), what);
  const state = sync(() => new native.NativeStateFile(given, args, what === 'writeJson'));
  await call(() => state.write(bytes));
}

/**
 * Read-modify-write of a JSON file under its lock: `fn` gets the current
 * value (a copy of `default` when there is no file, else undefined) and
 * returns the new one — or a promise of it — which replaces the file.
 * Concurrent updates from any number of processes never lose one
 * another's change. The lock is held until `fn` settles (the event loop
 * runs meanwhile); if it throws, the file is unchanged and the error goes
 * on. With `fence`, a stale token is refused before `fn` is called.
 * Resolves with the new value (as written).
 */
async function updateJson(file, fn, opts) {
  const given = path(file, 'updateJson');
  if (typeof fn !== 'function') throw new InvalidInput(`updateJson: the second argument must be a function, not ${shown(fn)}`);
  const o = options(opts, UPDATE, 'updateJson');
  // Copied through JSON, so `fn` may change what it gets.
  const fallback = o.default === undefined ? undefined : jsonOf(o.default, 'updateJson: default');
  const update = sync(() => new native.NativeStateFile(given, writeArgs(o, 'updateJson'), true));
  const begun = await call(() => update.begin());
  let text;
  try {
    const old = begun.old ?? fallback;
    const inside = [...(updating.getStore() ?? []), begun.lock];
    const value = await updating.run(inside, () => fn(old === undefined ? undefined : JSON.parse(old)));
    if (value === undefined) {
      throw new InvalidInput(`updateJson: the function returned undefined, which is not JSON; return the new value`);
    }
    text = jsonOf(value, "updateJson: the function's result");
  } catch (e) {
    // Nothing is written; the lock is let go.
    await call(() => update.finish(null)).catch(() => {});
    throw e;
  }
  await call(() => update.finish(text));
  return JSON.parse(text);
}

module.exports = { writeFile, writeJson, updateJson };
