"""Threads taking turns on one name, sharing one Store or each with its own
(issue 41, defect 14: 4 threads × 100 cycles took 7.6 s sharing a Store
against 0.4 s with a Store each — a waiter waited out the wake's settle
for a release committed on its own connection).

    python bench/threads.py STORE_URL [THREADS CYCLES]
    python bench/threads.py sqlite:///tmp/threads.db 4 100

Prints the wall time of each way and their ratio (shared ÷ own).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, List

import leasehold as lh


def turns(stores: Callable[[int], lh.Store], threads: int, cycles: int, name: str) -> float:
    def one(i: int) -> None:
        store = stores(i)
        for _ in range(cycles):
            with store.lease(name, ttl="30s", wait="60s"):
                pass

    workers: List[threading.Thread] = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.monotonic() - started


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    url = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cycles = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    shared = lh.Store(url)
    own = [lh.Store(url) for _ in range(threads)]
    run = f"{time.time_ns()}"
    took_shared = turns(lambda _: shared, threads, cycles, f"threads-shared-{run}")
    took_own = turns(lambda i: own[i], threads, cycles, f"threads-own-{run}")
    print(
        f"{threads} threads × {cycles} cycles: one Store shared {took_shared:.2f} s, "
        f"a Store each {took_own:.2f} s, ratio {took_shared / took_own:.2f}"
    )


if __name__ == "__main__":
    main()
