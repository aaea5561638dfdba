"""Adding N tasks: N `queue.add` calls next to one `queue.add_many` (issue
23: 1,000 single adds took 3.3 s). Each add is a durable transaction;
add_many is one.

    python bench/adds.py STORE_URL [N]
"""

from __future__ import annotations

import sys
import time

import pyleasehold as lh


def main() -> None:
    store = lh.Store(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    q = store.queue(f"adds-{time.time_ns()}")
    started = time.monotonic()
    for i in range(n):
        q.add({"n": i})
    one_by_one = time.monotonic() - started
    if not hasattr(q, "add_many"):  # a leasehold from before issue 23
        print(f"{n} tasks: {n} x add {one_by_one:.2f} s (no add_many)")
        return
    started = time.monotonic()
    q.add_many({"n": i} for i in range(n))
    at_once = time.monotonic() - started
    print(f"{n} tasks: {n} x add {one_by_one:.2f} s, add_many {at_once:.3f} s ({one_by_one / at_once:.0f}x)")


if __name__ == "__main__":
    main()
