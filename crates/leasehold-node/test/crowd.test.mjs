// A crowd on a few names must not cost the event loop: 500 acquires with
// a wait on 5 names, each holding 10 ms, while the loop's delay is
// measured and fs.promises calls (libuv's thread pool) keep answering —
// waits run on the package's threads, never on the loop or the pool.
import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { eachStore, unique, sleep } from './support.mjs';

eachStore(
  '500 waiters on 5 names: one holder at a time, the loop and the thread pool stay free',
  async (t, store, s) => {
    // Firestore's waiters read the name every 500 ms (no change stream
    // over REST): 100 hand-offs in a row on a name would outlast any
    // sensible wait, so the emulator gets a smaller crowd.
    const crowd = s.kind === 'firestore' ? 25 : 500;
    const names = Array.from({ length: 5 }, () => unique('crowd'));
    const delay = monitorEventLoopDelay({ resolution: 5 });
    delay.enable();
    let fsCalls = 0;
    let slowestFs = 0;
    let running = true;
    const fsLoop = (async () => {
      while (running) {
        const started = performance.now();
        await stat('.');
        slowestFs = Math.max(slowestFs, performance.now() - started);
        fsCalls += 1;
        await sleep(5);
      }
    })();
    const held = new Map(names.map((n) => [n, []]));
    await Promise.all(
      Array.from({ length: crowd }, async (_, i) => {
        const name = names[i % names.length];
        const lease = await store.acquire(name, { wait: '5m', ttl: '1m' });
        const start = performance.now();
        await sleep(10);
        held.get(name).push([start, performance.now(), lease.token]);
        await lease.release();
      }),
    );
    running = false;
    await fsLoop;
    delay.disable();
    // One holder at a time per name, tokens in the order of the grants.
    for (const [name, rows] of held) {
      rows.sort((a, b) => a[0] - b[0]);
      for (let i = 1; i < rows.length; i++) {
        assert.ok(rows[i - 1][1] <= rows[i][0], `two holders of ${name} overlapped`);
        assert.ok(rows[i][2] > rows[i - 1][2], `${name}: tokens out of the order of the grants`);
      }
    }
    assert.equal([...held.values()].reduce((n, rows) => n + rows.length, 0), crowd);
    const p99 = delay.percentile(99) / 1e6;
    t.diagnostic(`${s.kind}: ${crowd} waiters; loop delay p99 ${p99.toFixed(1)} ms, max ${(delay.max / 1e6).toFixed(1)} ms; ${fsCalls} fs calls, slowest ${slowestFs.toFixed(1)} ms`);
    // Generous bounds (timing belongs in benchmarks): a loop or pool
    // blocked by waits stalls for seconds, not tens of milliseconds.
    assert.ok(p99 < 100, `the event loop's delay p99 was ${p99.toFixed(1)} ms`);
    assert.ok(slowestFs < 1000, `an fs.promises call took ${slowestFs.toFixed(0)} ms`);
    assert.ok(fsCalls > 10, `${fsCalls} fs calls`);
  },
);
