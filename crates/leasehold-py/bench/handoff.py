"""How fast a waiting process gets a lease another process releases.

    python handoff.py STORE_URL [SECONDS [HOLD_MS]]

- hand-off: two processes take turns on one name (each holds HOLD_MS,
  default 150 — long enough for a polling waiter to back off to its
  longest pause — then asks again, waiting); each acquisition that followed the other's release is
  timed from that release returning to the acquisition returning, on the
  system-wide monotonic clock. Prints the median, 90th percentile and max.
- rounds/s: 1 and 8 processes each looping `with store.lease(name,
  wait=True)` for SECONDS; prints the rounds per second of all together.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time

import leasehold as lh


def turns(url: str, seconds: float, hold: float, out: "mp.Queue[list[tuple[float, float, int]]]") -> None:
    store = lh.Store(url)
    events = []
    stop = time.monotonic() + seconds
    me = mp.current_process().pid or 0
    while time.monotonic() < stop:
        lease = store.lease("handoff", ttl="10s", wait=True)
        lease.acquire()
        got = time.monotonic()
        time.sleep(hold)
        lease.release()
        events.append((got, time.monotonic(), me))
        time.sleep(0.001)  # let the other one, waiting, take it
    out.put(events)


def rounds(url: str, name: str, seconds: float, out: "mp.Queue[int]") -> None:
    store = lh.Store(url)
    n = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        with store.lease(name, ttl="10s", wait=True):
            n += 1
    out.put(n)


def run_all(target, args_of, count: int) -> list:  # type: ignore[no-untyped-def]
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=target, args=(*args_of(i), out)) for i in range(count)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return results


def main() -> None:
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    hold = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.150
    events = sorted(e for batch in run_all(turns, lambda i: (url, seconds, hold), 2) for e in batch)
    handoffs = [
        (got - prev_released) * 1000
        for (_, prev_released, prev_pid), (got, _, pid) in zip(events, events[1:])
        if pid != prev_pid and got >= prev_released
    ]
    handoffs.sort()
    print(
        f"hand-off: {len(handoffs)} between two processes, median {statistics.median(handoffs):.2f} ms, "
        f"p90 {handoffs[int(len(handoffs) * 0.9)]:.2f} ms, max {handoffs[-1]:.2f} ms"
    )
    for count in (1, 8):
        total = sum(run_all(rounds, lambda i: (url, f"rounds{count}", seconds), count))
        print(f"rounds/s with {count} process(es) on one name: {total / seconds:.0f}")


if __name__ == "__main__":
    main()
