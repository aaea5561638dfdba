// leasehold for Node.js: leases with fencing tokens on the stores the CLI
// uses, over the Rust library (the native addon: src/). The modules under
// lib/ are the API: they check options, turn AbortSignals into cancels,
// and make every error one of the package's classes (lib/errors.js).
// Every call that can block — a store round trip, a wait — runs on the
// package's own threads and settles a promise: never on the event loop,
// never on libuv's thread pool.
'use strict';
const native = require('./lib/native.js');
const { LeaseholdError, classes } = require('./lib/errors.js');
const { Store, Lease } = require('./lib/store.js');
const { writeFile, writeJson, updateJson } = require('./lib/files.js');
const { lock, FileLock } = require('./lib/lock.js');
const { Queue, Task } = require('./lib/queue.js');

// Every name, assigned once so: index.mjs re-exports them (Node reads a
// CommonJS module's names from `exports.NAME =` lines).
exports.Store = Store;
exports.Lease = Lease;
exports.writeFile = writeFile;
exports.writeJson = writeJson;
exports.updateJson = updateJson;
exports.lock = lock;
exports.FileLock = FileLock;
exports.Leadership = require('./lib/leadership.js').Leadership;
exports.Observer = require('./lib/leadership.js').Observer;
exports.Queue = Queue;
exports.Task = Task;
exports.version = native.version();
exports.LeaseholdError = LeaseholdError;
exports.Held = classes.Held;
exports.WaitTimeout = classes.WaitTimeout;
exports.LeaseLost = classes.LeaseLost;
exports.StaleToken = classes.StaleToken;
exports.StoreBusy = classes.StoreBusy;
exports.StoreUnavailable = classes.StoreUnavailable;
exports.BadData = classes.BadData;
exports.DiskFull = classes.DiskFull;
exports.ReadOnly = classes.ReadOnly;
exports.PermissionDenied = classes.PermissionDenied;
exports.AuthFailed = classes.AuthFailed;
exports.Unsupported = classes.Unsupported;
exports.InvalidInput = classes.InvalidInput;
exports.InvalidName = classes.InvalidName;
exports.Failed = classes.Failed;
exports.Stalled = classes.Stalled;
exports.RunTimeout = classes.RunTimeout;
exports.NothingToClaim = classes.NothingToClaim;
exports.NoSuchTask = classes.NoSuchTask;
