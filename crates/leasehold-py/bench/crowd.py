"""`async with` under a crowd (issues 23 and 41): TASKS tasks over NAMES
names, each holding HOLD ms, waiting WAIT (a duration, or True). Prints the
wall time next to the sum of the holds, how many were granted and how many
got Held, the hand-off per grant on a name (from the end of one holder's
block to the start of the next one's: the release, the wake and the
acquire; median and 95th percentile), the event loop's lag (a 1 ms ticker:
median, 99th percentile, max), the process's CPU seconds (all threads),
and how long an unrelated asyncio.to_thread call waited meanwhile. A run
still going after LIMIT seconds (default 120) is cut there and says how
many were granted by then.

    python bench/crowd.py STORE_URL [TASKS NAMES HOLD_MS WAIT [LIMIT]]
    python bench/crowd.py sqlite:///tmp/crowd.db 200 5 10 60s

    # issue 41's crowds: 100, 200 and 500 tasks on one name, 10 ms holds
    python bench/crowd.py --one-name sqlite:///tmp/crowd.db 100,200,500

    # issue 41's threads: THREADS threads, a Store each, one 10 ms hold
    # each on one name with wait="90s" (it failed with StoreBusy)
    python bench/crowd.py --threads sqlite:///tmp/crowd.db 200

Run it under `timeout`: before issue 23's fix it hung.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Tuple, Union

import pyleasehold as lh


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def pct(values: List[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


async def crowd(
    store: lh.Store, tasks: int, names: int, hold: float, wait: Union[str, bool, None], limit: float, prefix: str
) -> None:
    lags: List[float] = []
    held = 0
    spans: Dict[str, List[Tuple[float, float]]] = {}

    async def ticker() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.001)
            lags.append(time.monotonic() - before - 0.001)

    async def one(i: int) -> None:
        nonlocal held
        name = f"{prefix}-{i % names}"
        try:
            async with store.lease(name, ttl="30s", wait=wait):
                start = time.monotonic()
                await asyncio.sleep(hold)
                spans.setdefault(name, []).append((start, time.monotonic()))
        except lh.Held:
            held += 1

    async def unrelated() -> float:
        await asyncio.sleep(0.05)  # the crowd is waiting by now
        started = time.monotonic()
        await asyncio.to_thread(lambda: None)
        return time.monotonic() - started

    tick = asyncio.create_task(ticker())
    side = asyncio.create_task(unrelated())
    cpu_before, started = cpu(), time.monotonic()
    everyone = asyncio.gather(*(one(i) for i in range(tasks)))
    cut = False
    try:
        await asyncio.wait_for(asyncio.shield(everyone), limit)
    except asyncio.TimeoutError:
        cut = True
    wall, cpu_used = time.monotonic() - started, cpu() - cpu_before
    tick.cancel()
    granted = sum(len(v) for v in spans.values())
    handoffs = sorted(
        b[0] - a[1] for rows in spans.values() for a, b in zip(sorted(rows), sorted(rows)[1:])
    )
    lags.sort()
    print(
        f"{tasks} tasks on {names} name(s) holding {hold * 1000:.0f} ms, wait={wait!r}: "
        f"{wall:.2f} s{' (cut)' if cut else ''} (holds: {tasks * hold:.2f} s in all, {tasks * hold / names:.2f} s per name); "
        f"granted {granted}, Held {held}; "
        f"hand-off median {pct(handoffs, 0.5) * 1000:.1f} ms, 95th percentile {pct(handoffs, 0.95) * 1000:.1f} ms; "
        f"loop lag median {statistics.median(lags) * 1000:.1f} ms, "
        f"99th percentile {pct(lags, 0.99) * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms; "
        f"CPU {cpu_used:.2f} s; to_thread waited {await side:.3f} s",
        flush=True,
    )
    if cut:
        # What is still waiting is abandoned with the process.
        os._exit(0)
    await everyone


def threads(url: str, count: int) -> None:
    import threading

    failures: List[Tuple[float, str]] = []
    granted = 0
    counted = threading.Lock()
    go = threading.Event()
    name = f"threads-{os.getpid()}"

    def one() -> None:
        nonlocal granted
        go.wait()
        try:
            with lh.Store(url).lease(name, ttl="30s", wait="90s"):
                time.sleep(0.01)
            with counted:
                granted += 1
        except lh.Error as e:
            with counted:
                failures.append((time.monotonic() - started, f"{type(e).__name__}: {e}"))

    workers = [threading.Thread(target=one) for _ in range(count)]
    for w in workers:
        w.start()
    cpu_before, started = cpu(), time.monotonic()
    go.set()
    for w in workers:
        w.join()
    kinds: Dict[str, int] = {}
    for _, what in failures:
        kinds[what.split(":")[0]] = kinds.get(what.split(":")[0], 0) + 1
    print(
        f"{count} threads, a Store each, one name, wait='90s': {time.monotonic() - started:.2f} s; "
        f"granted {granted}, failed {len(failures)} {kinds or ''}"
        + (f" (first after {min(t for t, _ in failures):.1f} s: {min(failures)[1][:300]})" if failures else "")
        + f"; CPU {cpu() - cpu_before:.2f} s",
        flush=True,
    )


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--threads":
        threads(args[1], int(args[2]) if len(args) > 2 else 200)
        return
    if args and args[0] == "--one-name":
        url, counts = args[1], [int(n) for n in (args[2] if len(args) > 2 else "100,200,500").split(",")]
        limit = float(args[3]) if len(args) > 3 else 120
        for n in counts:
            # Each crowd in a process of its own: a cut one ends its process.
            subprocess.run([sys.executable, __file__, url, str(n), "1", "10", "60s", str(limit)], check=True)
        return
    args += ["200", "5", "10", "60s", "120"][len(args) - 1 :]
    url, tasks, names, hold_ms, wait = args[0], int(args[1]), int(args[2]), float(args[3]), args[4]
    asyncio.run(
        crowd(
            lh.Store(url),
            tasks,
            names,
            hold_ms / 1000,
            {"True": True, "None": None}.get(wait, wait),
            float(args[5]),
            f"crowd-{os.getpid()}",
        )
    )


if __name__ == "__main__":
    main()
