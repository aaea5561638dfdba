// Queue and Task: the store's task queue (SQLite and PostgreSQL). A claim
// is a lease on the task, kept by heartbeats on the package's threads
// until it is reported — once: done, fail, or handed back. A report the
// store refuses (the claim ran past its TTL, or was claimed again) is
// LeaseLost and records nothing, so a task is done at most once.
'use strict';
const native = require('./native.js');
const { classes } = require('./errors.js');
const { NATIVE, asyncDispose, sync, call, options, cancellable, lossHub, Kept } = require('./common.js');

const { InvalidInput, InvalidName, LeaseLost, NothingToClaim } = classes;

const ADD = { id: 'string', priority: 'number', delay: 'duration', at: 'date', maxAttempts: 'number' };
const CLAIM = {
  ttl: 'duration',
  wait: 'wait',
  owner: 'string',
  heartbeat: 'duration',
  margin: 'duration',
  signal: 'signal',
};
const WORKER = { ...CLAIM, concurrency: 'number' };
// Whether a report was made or is under way (for `worker`).
const REPORTED = Symbol('reported');

/** `value` as JSON text, or InvalidInput naming `what` (a BigInt, a cycle, a function…). */
function json(value, what) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new InvalidInput(`${what} is not JSON: ${e.message}`);
  }
  if (text === undefined) throw new InvalidInput(`${what} is not JSON: ${typeof value} has no JSON form`);
  return text;
}

/** What a failure records as the task's last error: an Error's stack, else its text. */
function described(error) {
  return error instanceof Error ? (error.stack ?? String(error)) : String(error ?? 'failed');
}

/**
 * A claimed task: `payload`, and the claim's `token` (larger than every
 * earlier claim's of this task), kept until reported with `done`, `fail`
 * or `release` — once.
 */
class Task extends Kept {
  #native;
  #payload;

  /** @internal Made by `queue.claim`. */
  constructor(nativeTask, hub) {
    super(nativeTask, hub);
    this.#native = nativeTask;
    this.#payload = JSON.parse(nativeTask.payload);
  }

  get id() {
    return this.#native.id;
  }

  get queue() {
    return this.#native.queue;
  }

  /** The payload, as added (a JSON value). */
  get payload() {
    return this.#payload;
  }

  /** The claim's token: larger than every earlier claim's of this task. */
  get token() {
    return sync(() => this.#native.token);
  }

  /** This claim's attempt (1 for the first). */
  get attempt() {
    return this.#native.attempt;
  }

  get maxAttempts() {
    return this.#native.maxAttempts;
  }

  /** @internal */
  get [REPORTED]() {
    return this.#native.reported;
  }

  /** How the claim ended — 'done', 'retrying', 'dead', 'released', 'lost' — or null while held. */
  get outcome() {
    return this.#native.outcome ?? null;
  }

  /** Mark the task done, with `result` (any JSON value) recorded. Rejects with LeaseLost when the claim was lost. */
  done(result) {
    return call(() => this.#native.done(result === undefined ? undefined : json(result, 'done: the result')));
  }

  /**
   * Record a failed attempt with `error` (an Error's stack, or its text):
   * retried with backoff (or after `retryIn`), never with `retry: false`;
   * dead once its attempts are used up. Resolves with 'retrying' or 'dead'.
   */
  fail(error, opts) {
    return call(() => {
      const o = options(opts, { retry: 'boolean', retryIn: 'duration' }, 'fail');
      return this.#native.fail(described(error), o.retry ?? true, o.retryIn);
    });
  }

  /** Hand the claim back without charging the attempt. */
  release() {
    return call(() => this.#native.release());
  }

  /**
   * `await using task = await queue.claim()`: a task left unreported at
   * the block's end — it threw, or forgot `done()` — is failed (retried
   * with backoff, dead once its attempts are used up, as Python's `with
   * task:` fails on an exception). Nothing when it was reported.
   */
  [asyncDispose]() {
    if (this[REPORTED]) return Promise.resolve();
    return this.fail('the task was not reported (done, fail or release) before its `await using` block ended');
  }

  toString() {
    return `Task(${this.queue}/${this.id}, attempt ${this.attempt}, token ${this.#native.token})`;
  }
}

/** A task queue of a store: `store.queue(name)`. */
class Queue {
  #store;
  #name;

  /** @internal Made by `store.queue`. */
  constructor(store, queueName) {
    if (typeof queueName !== 'string') throw new InvalidName(`queue: the name must be a string, not ${typeof queueName}`);
    this.#name = sync(() => native.NativeStore.queueName(queueName));
    this.#store = store;
  }

  get name() {
    return this.#name;
  }

  /**
   * Add a task with `payload` (any JSON value); resolves with its id.
   * `id`: the task's (generated when not given) — the same id again is a
   * no-op with the same task, InvalidInput with another. `priority`: a
   * whole number, higher claimed first. `delay` (ms or a duration string)
   * or `at` (a Date): when it becomes claimable. `maxAttempts` (5): claims
   * before it is dead.
   */
  add(payload, opts) {
    return call(() => {
      const o = options(opts, ADD, 'add');
      const text = json(payload, 'add: the payload');
      if (o.at) o.at = o.at.getTime();
      return this.#store[NATIVE].taskAdd(this.#name, text, o);
    });
  }

  /**
   * Claim the next task, highest priority first. Rejects with
   * NothingToClaim when there is none — after `wait` (ms, a duration
   * string, or true: as long as it takes). `signal` ends a wait, and the
   * promise rejects with its reason. `ttl` (60 s), `heartbeat`, `margin`,
   * `owner`: as for `store.acquire`.
   */
  async claim(opts) {
    const { signal, ...args } = options(opts, CLAIM, 'claim');
    const hub = lossHub();
    const got = await cancellable(
      signal,
      (cancel) => this.#store[NATIVE].claim(this.#name, args, cancel, (message) => hub.fire(message)),
      (task) => task.release(),
    );
    return new Task(got, hub);
  }

  /** The task `id` as `leasehold task show --json` prints it, or null. */
  async get(id) {
    if (typeof id !== 'string') throw new InvalidName(`get: the task id must be a string, not ${typeof id}`);
    const text = await call(() => this.#store[NATIVE].taskGet(this.#name, id));
    return text === null || text === undefined ? null : JSON.parse(text);
  }

  /**
   * Claim and run tasks with `fn(task)`, up to `concurrency` (1) at a
   * time: a task is reported done with what `fn` returns (its result), or
   * failed with what it throws — unless `fn` reported it itself. The
   * task's `signal` aborts when its claim is lost. `wait` (true): how long
   * an idle worker waits for a task before it stops (false: stop once
   * nothing is claimable). `signal`: stop claiming; in-flight tasks are
   * awaited. Resolves with counts by outcome (done, failed, dead, lost,
   * released); rejects with the store's error that stopped it, once the
   * tasks in flight have settled. `ttl`, `heartbeat`, `margin`, `owner`:
   * as for `claim`.
   */
  async worker(fn, opts) {
    if (typeof fn !== 'function') throw new InvalidInput('worker: the first argument must be a function (task) => result');
    const { concurrency = 1, signal, wait = true, ...claiming } = options(opts, WORKER, 'worker');
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new InvalidInput(`worker: concurrency must be a whole number from 1, not ${concurrency}`);
    }
    signal?.throwIfAborted();
    // Stops the claims on the user's abort or on a failure of the store.
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const counts = { done: 0, failed: 0, dead: 0, lost: 0, released: 0 };
    let failure = null;
    const slot = async () => {
      while (!stop.signal.aborted) {
        let task;
        try {
          task = await this.claim({ ...claiming, wait, signal: stop.signal });
        } catch (e) {
          if (stop.signal.aborted || e instanceof NothingToClaim) return;
          throw e;
        }
        const outcome = await run(fn, task);
        if (outcome !== null) counts[outcome === 'retrying' ? 'failed' : outcome] += 1;
      }
    };
    const slots = Array.from({ length: concurrency }, () =>
      slot().catch((e) => {
        failure ??= e;
        stop.abort(e);
      }),
    );
    await Promise.all(slots);
    signal?.removeEventListener('abort', onAbort);
    if (failure) throw failure;
    return counts;
  }

  toString() {
    return `Queue(${JSON.stringify(this.#name)})`;
  }
}

/**
 * Run `fn(task)` and report how it went, unless `fn` did: the outcome
 * (null when `fn`'s own report is still under way).
 */
async function run(fn, task) {
  let ok = true;
  let value;
  try {
    value = await fn(task);
  } catch (e) {
    [ok, value] = [false, e];
  }
  for (;;) {
    if (task[REPORTED]) return task.outcome;
    try {
      if (ok) await task.done(value);
      else await task.fail(value);
    } catch (e) {
      if (e instanceof LeaseLost) return 'lost';
      // A result with no JSON form (refused before anything was
      // recorded): the attempt failed with that.
      if (!(ok && e instanceof InvalidInput && !task[REPORTED])) throw e;
      [ok, value] = [false, e];
    }
  }
}

module.exports = { Queue, Task };
