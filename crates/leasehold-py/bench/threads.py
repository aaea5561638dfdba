"""Threads taking turns on one name, sharing one Store or each with its own
(issue 41, defect 14: 4 threads × 100 cycles took 7.6 s sharing a Store
against 0.4 s with a Store each — a waiter waited out the wake's settle
for a release committed on its own connection).

    python bench/threads.py STORE_URL [THREADS CYCLES]
    python bench/threads.py sqlite:///tmp/threads.db 4 100

Prints the wall time of each way, how many of its turns were hand-offs
(the lease passed to another thread, which waited for it) and the ratio
of the times (shared ÷ own).

Compare the times only at equal hand-offs: a turn that is not a hand-off
(the thread that released takes the lease again at once, no waiter being
queued yet) costs a fraction of one that is. With a Store each on SQLite,
the other threads' writes wait for SQLite's write lock in its busy
handler, which sleeps 1, 2, 5, 10 … 25 ms between tries: while they
sleep they are not queued, and the releasing thread takes the lease again
— a run of the same thread's turns. Threads sharing a Store take turns
on its connection (a lock of the process, no sleep), so each joins the
queue at once and every turn is a hand-off (first come, first served).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, List, Tuple

import pyleasehold as lh


def turns(stores: Callable[[int], lh.Store], threads: int, cycles: int, name: str) -> Tuple[float, int]:
    """The wall time, and how many turns went to another thread than the
    turn before."""
    order: List[int] = []

    def one(i: int) -> None:
        store = stores(i)
        for _ in range(cycles):
            with store.lease(name, ttl="30s", wait="60s"):
                order.append(i)

    workers: List[threading.Thread] = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.monotonic() - started
    return took, sum(1 for a, b in zip(order, order[1:]) if a != b)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    url = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cycles = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    shared = lh.Store(url)
    own = [lh.Store(url) for _ in range(threads)]
    run = f"{time.time_ns()}"
    took_shared, passed_shared = turns(lambda _: shared, threads, cycles, f"threads-shared-{run}")
    took_own, passed_own = turns(lambda i: own[i], threads, cycles, f"threads-own-{run}")
    of = threads * cycles - 1
    print(
        f"{threads} threads × {cycles} cycles: one Store shared {took_shared:.2f} s ({passed_shared} of {of} turns "
        f"hand-offs), a Store each {took_own:.2f} s ({passed_own} hand-offs), ratio {took_shared / took_own:.2f}"
    )


if __name__ == "__main__":
    main()
