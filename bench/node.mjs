#!/usr/bin/env node
// bench/node.mjs — the Node.js package next to what a Node user would
// otherwise install, measured in the same run, alternating the two over
// rounds, the ratio taken within each round (docs/NODE.md, "Performance").
//
//   bench/node.mjs [--rounds R] [--seconds S] [--dir DIR]
//
// Needs LEASEHOLD_NODE_ADDON (a release build of the addon: `cargo build
// --release -p leasehold-node`, docs/NODE.md "Performance"),
// LEASEHOLD_NODE_TOOLS (the references, from
// crates/leasehold-node/tools/package-lock.json: scripts/test installs
// them under target/node-tools), LEASEHOLD_TEST_SERVERS (starts the
// PostgreSQL server), redis-server on PATH. Not yet a section of bench/run.
//
// - lock + unlock per second, one client, files in DIR: leasehold's
//   acquire + release on a SQLite store in DIR (a fencing token each
//   time) next to proper-lockfile's lock + unlock of a file in DIR (a
//   directory made and removed: no token). Goal ≥ 1×.
// - acquire + release per second on one redis-server (`appendonly yes`,
//   `appendfsync always`, its AOF in DIR: the same fsync for both),
//   1 and 8 clients (concurrent loops in this process, a name each):
//   leasehold's Redis store next to node-redlock 4 on ioredis (one
//   server, a random value, no token). Goal ≥ 0.8×.
// - claim + done per second, 8 workers on one PostgreSQL: leasehold's
//   queue next to pg-boss 10 (fetch + complete), each from a queue filled
//   beforehand. Goal ≥ 1×.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const repo = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const argv = process.argv.slice(2);
const option = (name, fallback) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : fallback;
};
const ROUNDS = Number(option('--rounds', 5));
const SECONDS = Number(option('--seconds', 3));
const DIR = mkdtempSync(path.join(option('--dir', tmpdir()), 'bench-node-'));
for (const v of ['LEASEHOLD_NODE_ADDON', 'LEASEHOLD_NODE_TOOLS', 'LEASEHOLD_TEST_SERVERS']) {
  if (!process.env[v]) {
    console.error(`bench/node.mjs: set ${v} (docs/NODE.md, "Performance")`);
    process.exit(2);
  }
}
const tools = createRequire(path.resolve(process.env.LEASEHOLD_NODE_TOOLS, 'package.json'));
const lockfile = tools('proper-lockfile');
const Redlock = tools('redlock');
const Redis = tools('ioredis');
const PgBoss = tools('pg-boss');
const lh = createRequire(import.meta.url)(path.join(repo, 'crates/leasehold-node/index.js'));

const children = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));

async function freePort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

async function startRedis() {
  const port = await freePort();
  const dir = path.join(DIR, 'redis');
  mkdirSync(dir);
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir,
    '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(server);
  for await (const line of createInterface({ input: server.stdout })) {
    if (line.includes('Ready to accept connections')) break;
  }
  return port;
}

async function startPostgres() {
  const servers = spawn(process.env.LEASEHOLD_TEST_SERVERS, ['postgres'], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(servers);
  for await (const line of createInterface({ input: servers.stdout })) {
    const { postgres } = JSON.parse(line);
    if (postgres.missing) throw new Error(postgres.missing);
    return postgres.url;
  }
  throw new Error('leasehold-test-servers printed nothing');
}

/** Operations per second of `clients` loops of `op(client)` for SECONDS. */
async function rate(clients, op) {
  const deadline = performance.now() + SECONDS * 1000;
  const counts = await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      let n = 0;
      while (performance.now() < deadline) {
        await op(client);
        n += 1;
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / SECONDS;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows = [];
/** R rounds of leasehold and the reference, alternating which goes first; the ratio within each. */
async function compare(what, clients, goal, ours, theirs) {
  const mine = [];
  const ref = [];
  const ratios = [];
  for (let round = 0; round < ROUNDS; round++) {
    let a;
    let b;
    if (round % 2 === 0) {
      a = await ours();
      b = await theirs();
    } else {
      b = await theirs();
      a = await ours();
    }
    mine.push(a);
    ref.push(b);
    ratios.push(a / b);
  }
  rows.push({ what, clients, mine: median(mine), ref: median(ref), ratios, goal });
  console.error(`bench/node.mjs: ${what}, ${clients} client(s): ratio ${median(ratios).toFixed(2)}`);
}

// Files: leasehold's SQLite lease next to proper-lockfile.
{
  const store = lh.Store.sqlite(path.join(DIR, 'leases.db'));
  const target = path.join(DIR, 'locked');
  writeFileSync(target, 'data');
  await compare('lock + unlock, files in one directory: leasehold acquire + release (SQLite: a token each) ÷ proper-lockfile', 1, 1,
    () => rate(1, async () => (await store.acquire('bench-file')).release()),
    () => rate(1, async () => (await lockfile.lock(target, { realpath: false }))()));
  if (typeof lh.lock === 'function') {
    await compare('lock + unlock of one file: leasehold lock (flock, no token) ÷ proper-lockfile', 1, 1,
      () => rate(1, async () => (await lh.lock(target)).release()),
      () => rate(1, async () => (await lockfile.lock(target, { realpath: false }))()));
  }
  store.close();
}

// Redis: leasehold's Redis store next to node-redlock.
{
  const port = await startRedis();
  const store = new lh.Store(`redis://127.0.0.1:${port}`);
  const client = new Redis({ port, host: '127.0.0.1' });
  const redlock = new Redlock([client], { retryCount: 0 });
  for (const clients of [1, 8]) {
    await compare('acquire + release on one Redis: leasehold ÷ node-redlock', clients, 0.8,
      () => rate(clients, async (c) => (await store.acquire(`bench-redis-${c}`, { ttl: '30s' })).release()),
      () => rate(clients, async (c) => (await redlock.lock(`bench-redlock-${c}`, 30000)).unlock()));
  }
  client.disconnect();
  store.close();
}

// Queues: leasehold's queue next to pg-boss, on one PostgreSQL.
{
  const url = await startPostgres();
  const store = new lh.Store(url);
  if (typeof store.queue !== 'function') {
    console.error('bench/node.mjs: this build has no queue (store.queue): the queue comparison is skipped');
  } else {
    const boss = new PgBoss({ connectionString: url.replace(/\?.*$/, ''), schema: 'pgboss' });
    boss.on('error', (e) => console.error('pg-boss:', e.message));
    await boss.start();
    const WORKERS = 8;
    let round = 0;
    await compare('claim + done, 8 workers on one PostgreSQL: leasehold ÷ pg-boss', WORKERS, 1,
      async () => {
        const q = store.queue(`bench-q-${round}`);
        for (let i = 0; i < 20_000; i++) await q.add({ i });
        return rate(WORKERS, async () => {
          const task = await q.claim({ ttl: '60s' });
          await task.done();
        });
      },
      async () => {
        const name = `bench-boss-${round++}`;
        await boss.createQueue(name);
        await boss.insert(Array.from({ length: 20_000 }, (_, i) => ({ name, data: { i } })));
        return rate(WORKERS, async () => {
          const [job] = await boss.fetch(name);
          await boss.complete(name, job.id);
        });
      });
    await boss.stop({ graceful: false, wait: false });
  }
  store.close();
}

console.log('| what | clients | leasehold /s | reference /s | ratio: median (min–max) | goal |');
console.log('|---|---:|---:|---:|---|---:|');
for (const r of rows) {
  const ratio = `${median(r.ratios).toFixed(2)} (${Math.min(...r.ratios).toFixed(2)}–${Math.max(...r.ratios).toFixed(2)})`;
  console.log(`| ${r.what} | ${r.clients} | ${Math.round(r.mine)} | ${Math.round(r.ref)} | ${ratio} | ≥ ${r.goal}× |`);
}
process.exit(0);
