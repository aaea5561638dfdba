"""`async with` under a crowd (issue 23): TASKS tasks over NAMES names, each
holding HOLD ms, waiting WAIT (a duration, or True). Prints the wall time
next to the sum of the holds, how many got Held, the event loop's lag (a
1 ms ticker: median, 95th percentile, max) and how long an unrelated
asyncio.to_thread call waited meanwhile.

    python bench/crowd.py STORE_URL [TASKS NAMES HOLD_MS WAIT]
    python bench/crowd.py sqlite:///tmp/crowd.db 200 5 10 60s

Run it under `timeout`: before issue 23's fix it hung.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import List, Union

import leasehold as lh


async def crowd(store: lh.Store, tasks: int, names: int, hold: float, wait: Union[str, bool]) -> None:
    lags: List[float] = []
    held = 0

    async def ticker() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.001)
            lags.append(time.monotonic() - before - 0.001)

    async def one(i: int) -> None:
        nonlocal held
        try:
            async with store.lease(f"crowd-{i % names}", ttl="30s", wait=wait):
                await asyncio.sleep(hold)
        except lh.Held:
            held += 1

    async def unrelated() -> float:
        await asyncio.sleep(0.05)  # the crowd is waiting by now
        started = time.monotonic()
        await asyncio.to_thread(lambda: None)
        return time.monotonic() - started

    tick = asyncio.create_task(ticker())
    side = asyncio.create_task(unrelated())
    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(tasks)))
    wall = time.monotonic() - started
    tick.cancel()
    lags.sort()
    print(
        f"{tasks} tasks on {names} names holding {hold * 1000:.0f} ms, wait={wait!r}: "
        f"{wall:.2f} s (holds: {tasks * hold:.2f} s in all, {tasks * hold / names:.2f} s per name); "
        f"Held: {held}; loop lag median {statistics.median(lags) * 1000:.1f} ms, "
        f"95th percentile {lags[int(len(lags) * 0.95)] * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms; "
        f"to_thread waited {await side:.3f} s"
    )


def main() -> None:
    args = sys.argv[1:] + ["200", "5", "10", "60s"][len(sys.argv) - 2 :]
    url, tasks, names, hold_ms, wait = args[0], int(args[1]), int(args[2]), float(args[3]), args[4]
    asyncio.run(crowd(lh.Store(url), tasks, names, hold_ms / 1000, True if wait == "True" else wait))


if __name__ == "__main__":
    main()
