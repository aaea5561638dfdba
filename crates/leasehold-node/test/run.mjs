// Runs the package's `node --test` suites (scripts/test calls it) against
// every store: SQLite in a temp dir, and PostgreSQL, etcd, Redis and the
// Firestore emulator started once for all the suites by the workspace's
// `leasehold-test-servers` (127.0.0.1, free ports, temp dirs, stopped by
// pid when this ends). A store that cannot be started here is passed on
// as missing, with its reason: its tests are skipped saying so, and fail
// under CI=true.
//
//   LEASEHOLD_NODE_ADDON=… LEASEHOLD_TEST_SERVERS=… LEASEHOLD_BIN=… LEASEHOLD_CHECK_HISTORY=… node test/run.mjs [FILE…]
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const servers = process.env.LEASEHOLD_TEST_SERVERS;
if (!servers) {
  console.error('test/run.mjs: set LEASEHOLD_TEST_SERVERS to the leasehold-test-servers binary (scripts/test does)');
  process.exit(2);
}
const kinds = ['postgres', 'etcd', 'redis', 'firestore'];
const started = spawn(servers, kinds, { stdio: ['pipe', 'pipe', 'inherit'] });
const [line] = await Promise.race([
  (async () => {
    for await (const l of createInterface({ input: started.stdout })) return [l];
    return [null];
  })(),
  new Promise((_, reject) => started.once('exit', (code) => reject(new Error(`leasehold-test-servers exited with ${code}`)))),
]);
if (!line) throw new Error('leasehold-test-servers printed nothing');
const files = process.argv.slice(2).length
  ? process.argv.slice(2)
  : readdirSync(here)
      .filter((f) => f.endsWith('.test.mjs'))
      .map((f) => path.join(here, f));
const suite = spawn(process.execPath, ['--test', '--test-concurrency=1', ...files], {
  stdio: 'inherit',
  env: { ...process.env, LEASEHOLD_TEST_STORES: line },
});
const code = await new Promise((resolve) => suite.once('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
started.stdin.end();
await new Promise((resolve) => started.once('exit', resolve));
process.exit(code);
