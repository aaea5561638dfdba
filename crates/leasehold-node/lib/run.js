// store.run: a command under a lease, as `leasehold run` runs one, through
// the library's supervision — on the package's own thread, never the
// event loop nor libuv's pool. The command runs in its own process group
// with LEASEHOLD_NAME, LEASEHOLD_TOKEN, LEASEHOLD_GRANT, LEASEHOLD_OWNER
// and LEASEHOLD_STORE set; a guard process stops it before the lease
// could pass on, even if this process is stopped or killed. The promise
// settles once every process of it is gone and the lease released.
'use strict';
const os = require('node:os');
const native = require('./native.js');
const errors = require('./errors.js');
const { NATIVE, abortable, options, name } = require('./common.js');

const { InvalidInput } = errors.classes;

const RUN = {
  ttl: 'duration',
  heartbeat: 'duration',
  grace: 'duration',
  wait: 'wait',
  shared: 'shared',
  owner: 'string',
  stallTimeout: 'duration',
  progressFile: 'string',
  env: 'any',
  cwd: 'string',
  input: 'any',
  captureOutput: 'boolean',
  timeout: 'duration',
  signal: 'signal',
};

// Signal numbers to names ('SIGTERM'), as child_process reports them.
const signalNames = new Map(Object.entries(os.constants.signals).map(([n, v]) => [v, n]));

/** `env`: an object of strings, added to this process's environment for the command. */
function checkedEnv(env) {
  if (env === undefined) return undefined;
  if (env === null || typeof env !== 'object' || Array.isArray(env)) {
    throw new InvalidInput('run: env must be an object of strings (as process.env), added to this process\'s environment');
  }
  for (const [key, value] of Object.entries(env)) {
    if (typeof value !== 'string') {
      throw new InvalidInput(
        `run: env.${key} must be a string, not ${JSON.stringify(value) ?? typeof value}; nothing was run`,
      );
    }
  }
  return env;
}

/** `input`: a string (UTF-8) or bytes, fed to the command's stdin, which is then closed. */
function checkedInput(input) {
  if (input === undefined) return undefined;
  if (typeof input === 'string') return Buffer.from(input, 'utf8');
  if (Buffer.isBuffer(input)) return input;
  if (ArrayBuffer.isView(input)) return Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  throw new InvalidInput(`run: input must be a string or a Buffer (a TypedArray), not ${typeof input}`);
}

/**
 * Run `command` with `args` under the lease `leaseName`: resolves with
 * `{ code, signal, stdout, stderr }` when the command ran to its own end
 * (`code` 128+N for a signal N, and `signal` its name; `stdout`/`stderr`
 * Buffers with `captureOutput`, else null). Rejects with Held/WaitTimeout
 * (nothing ran), LeaseLost (the lease was lost: the command was stopped
 * before it could pass on), Stalled, RunTimeout, Failed (the command could
 * not start) — or, when `signal` aborted, with its reason once the wait
 * has left the queue or the command is gone and the lease released.
 */
async function run(store, leaseName, command, args, opts) {
  // run(name, command[, args][, options]), as child_process.spawn takes them.
  const objectArgs = typeof args === 'object' && args !== null && !Array.isArray(args);
  if (objectArgs && opts === undefined) [args, opts] = [[], args];
  args ??= [];
  name(leaseName, 'run');
  if (typeof command !== 'string' || command === '') {
    throw new InvalidInput(`run: the command must be a program's name or path (a non-empty string), not ${JSON.stringify(command) ?? typeof command}`);
  }
  if (!Array.isArray(args)) throw new InvalidInput('run: the arguments must be an array of strings');
  args.forEach((arg, i) => {
    if (typeof arg !== 'string') {
      throw new InvalidInput(`run: argument ${i} must be a string, not ${JSON.stringify(arg) ?? typeof arg}`);
    }
  });
  const { signal, env, input, ...rest } = options(opts, RUN, 'run');
  const given = { ...rest, env: checkedEnv(env), input: checkedInput(input) };
  const control = new native.NativeRunControl();
  const ended = await abortable(signal, () => control.stop(), () =>
    store[NATIVE].run(leaseName, [command, ...args], given, control, native.dir),
  );
  if (ended.warning) process.emitWarning(ended.warning, 'LeaseholdWarning');
  if (ended.held) {
    if (signal?.aborted) throw signal.reason;
    throw errors.held(ended.held);
  }
  const output = { stdout: ended.stdout ?? null, stderr: ended.stderr ?? null };
  if (ended.failure) {
    if (ended.interrupted && signal?.aborted) throw signal.reason;
    const e = errors.translate(new Error(ended.failure));
    if (ended.timeoutMs !== undefined && ended.timeoutMs !== null) e.timeout = ended.timeoutMs;
    if (rest.captureOutput) Object.assign(e, output);
    throw e;
  }
  const killedBy = ended.signal === undefined || ended.signal === null ? null : signalNames.get(ended.signal) ?? null;
  return { code: ended.code, signal: killedBy, ...output };
}

module.exports = { run };
