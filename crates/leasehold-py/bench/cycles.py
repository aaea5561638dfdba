"""The Python side of bench/run: one measurement of lock or lease cycles
per second, printed. Run by bench/run, alternating with the others."""

from __future__ import annotations

import sys
import time
from typing import Callable


def rate(cycle: Callable[[], None], seconds: float) -> float:
    for _ in range(20):  # warm up
        cycle()
    n, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        cycle()
        n += 1
    return n / (time.perf_counter() - started)


def main() -> None:
    what, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if what == "leasehold-lease":
        import pyleasehold as lh

        store = lh.Store(target)

        def cycle() -> None:
            with store.lease("bench"):
                pass

    elif what == "leasehold-lock":
        import pyleasehold as lh

        def cycle() -> None:
            with lh.lock(target):
                pass

    elif what == "filelock":
        import filelock

        held = filelock.FileLock(target)

        def cycle() -> None:
            held.acquire()
            held.release()

    elif what == "portalocker":
        import portalocker

        pl = portalocker.Lock(target, fail_when_locked=True)

        def cycle() -> None:
            pl.acquire()
            pl.release()

    else:
        raise SystemExit(f"unknown measurement {what}")
    print(f"{rate(cycle, seconds):.1f}")


if __name__ == "__main__":
    main()
