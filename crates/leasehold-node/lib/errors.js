// The package's errors: one class per outcome, each with a stable `code`.
// The class names are the Python package's exceptions' (and
// leasehold::ErrorKind::class_name's); the native addon words every
// message as `CLASS: message`, and `translate` turns it into an instance
// of CLASS — so everything the package throws is one of these.
'use strict';

class LeaseholdError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

const classes = {};
function define(name, code, base = LeaseholdError) {
  const made = {
    [name]: class extends base {},
  }[name];
  Object.defineProperty(made.prototype, 'code', { value: code, enumerable: true });
  classes[name] = made;
  return made;
}

const Held = define('Held', 'LEASEHOLD_HELD');
const WaitTimeout = define('WaitTimeout', 'LEASEHOLD_WAIT_TIMEOUT', Held);
const LeaseLost = define('LeaseLost', 'LEASEHOLD_LOST');
const StaleToken = define('StaleToken', 'LEASEHOLD_STALE_TOKEN');
const StoreUnavailable = define('StoreUnavailable', 'LEASEHOLD_STORE_UNAVAILABLE');
// Busy is a store that cannot be used right now, as Python's StoreBusy is.
const StoreBusy = define('StoreBusy', 'LEASEHOLD_STORE_BUSY', StoreUnavailable);
const BadData = define('BadData', 'LEASEHOLD_BAD_DATA');
const DiskFull = define('DiskFull', 'LEASEHOLD_DISK_FULL');
const ReadOnly = define('ReadOnly', 'LEASEHOLD_READ_ONLY');
const PermissionDenied = define('PermissionDenied', 'LEASEHOLD_PERMISSION_DENIED');
const AuthFailed = define('AuthFailed', 'LEASEHOLD_AUTH_FAILED');
const Unsupported = define('Unsupported', 'LEASEHOLD_UNSUPPORTED');
const InvalidInput = define('InvalidInput', 'LEASEHOLD_INVALID_INPUT');
const InvalidName = define('InvalidName', 'LEASEHOLD_INVALID_NAME', InvalidInput);
const Failed = define('Failed', 'LEASEHOLD_FAILED');
const Stalled = define('Stalled', 'LEASEHOLD_STALLED', Failed);
// store.run's timeout stopped the command (Python's RunTimeout, a Failed too).
const RunTimeout = define('RunTimeout', 'LEASEHOLD_RUN_TIMEOUT', Failed);
const NothingToClaim = define('NothingToClaim', 'LEASEHOLD_NOTHING_TO_CLAIM');
const NoSuchTask = define('NoSuchTask', 'LEASEHOLD_NO_SUCH_TASK');

/** The package's error for a native one (`CLASS: message`); others as they are. */
function translate(e) {
  if (!(e instanceof Error) || e instanceof LeaseholdError) return e;
  const m = /^([A-Za-z]+): ([\s\S]*)$/.exec(e.message);
  const made = m && Object.hasOwn(classes, m[1]) ? classes[m[1]] : null;
  return made ? new made(m[2]) : e;
}

/**
 * `Held` (or `WaitTimeout`) with who holds the name, from the addon's
 * facts; the name as `e[what]` (`leaseName`, or a lock's `path`).
 */
function held(facts, what = 'leaseName') {
  const made = facts.timedOut ? WaitTimeout : Held;
  const e = new made(facts.message);
  e[what] = facts.name;
  e.holders = facts.holders.map((h) => ({
    owner: h.owner,
    token: h.token ?? null,
    mode: h.mode,
    expiresAt: h.expiresAt === null || h.expiresAt === undefined ? null : new Date(h.expiresAt),
    pid: h.pid ?? null,
  }));
  e.waiters = facts.waiters;
  return e;
}

module.exports = { LeaseholdError, classes, translate, held };
