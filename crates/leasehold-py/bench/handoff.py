"""How fast a waiting process gets a lease another process releases.

    python handoff.py [--seconds S] [--hold MS] [--lock-dir DIR] STORE_URL...

For each store, and for flock(2) on a file in DIR (the reference: the
kernel hands the lock straight to its waiter; no TTL, no token, no store):

- hand-off: two processes take turns on one name (each holds HOLD_MS,
  default 150 — long enough for a polling waiter to back off to its
  longest pause — then asks again, waiting); each acquisition that
  followed the other's release is timed from that release returning to
  the acquisition returning, on the system-wide monotonic clock: median,
  90th percentile and max, and the median divided by flock's.
- rounds/s: 1 and 8 processes each looping `with store.lease(name,
  wait=True)` (flock: lock, unlock) for S seconds (default 5): the
  rounds per second of all together.

Prints a Markdown table (bench/run includes it in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import fcntl
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator

import pyleasehold as lh

FLOCK = "flock"


def holder(target: str, name: str) -> Callable[[], AbstractContextManager[None]]:
    """A context manager factory holding `name` in `target` while entered,
    waiting for it: a leasehold store URL, or FLOCK:DIR."""
    if target.startswith(FLOCK + ":"):
        path = os.path.join(target[len(FLOCK) + 1 :], name + ".lock")

        @contextmanager
        def flocked() -> Iterator[None]:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases it

        return flocked
    store = lh.Store(target)

    @contextmanager
    def leased() -> Iterator[None]:
        with store.lease(name, ttl="10s", wait=True):
            yield

    return leased


def turns(target: str, seconds: float, hold: float, out: "mp.Queue[list[tuple[float, float, int]]]") -> None:
    held = holder(target, "handoff")
    events = []
    stop = time.monotonic() + seconds
    me = os.getpid()
    while time.monotonic() < stop:
        with held():
            got = time.monotonic()
            time.sleep(hold)
        events.append((got, time.monotonic(), me))
        time.sleep(0.001)  # let the other one, waiting, take it
    out.put(events)


def rounds(target: str, name: str, seconds: float, out: "mp.Queue[int]") -> None:
    held = holder(target, name)
    n = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        with held():
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
        if p.exitcode != 0:
            raise SystemExit(f"handoff.py: a measuring process failed (exit {p.exitcode})")
    return results


def measure(target: str, seconds: float, hold: float) -> dict[str, float]:
    events = sorted(e for batch in run_all(turns, lambda i: (target, seconds, hold), 2) for e in batch)
    handoffs = sorted(
        (got - prev_released) * 1000
        for (_, prev_released, prev_pid), (got, _, pid) in zip(events, events[1:])
        if pid != prev_pid and got >= prev_released
    )
    if not handoffs:
        raise SystemExit(f"handoff.py: no hand-off between the two processes on {target}")
    figures = {
        "count": len(handoffs),
        "median": statistics.median(handoffs),
        "p90": handoffs[int(len(handoffs) * 0.9)],
        "max": handoffs[-1],
    }
    for count in (1, 8):
        total = sum(run_all(rounds, lambda i: (target, f"rounds{count}", seconds), count))
        figures[f"rounds{count}"] = total / seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--hold", type=float, default=150.0, help="milliseconds each turn holds")
    parser.add_argument("--lock-dir", help="where flock's file goes (default: a temporary directory)")
    parser.add_argument("stores", nargs="+", metavar="STORE_URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reference = measure(f"{FLOCK}:{args.lock_dir or tmp}", args.seconds, args.hold / 1000)
    print(
        f"| {args.hold:.0f} ms turns, {args.seconds:g} s each | hand-offs | median | p90 | max "
        "| median ÷ flock's | rounds/s, 1 process | 8 processes on one name |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for url in args.stores:
        f = measure(url, args.seconds, args.hold / 1000)
        print(
            f"| {url.split(':', 1)[0]} | {f['count']} | {f['median']:.2f} ms | {f['p90']:.2f} ms | {f['max']:.2f} ms "
            f"| {f['median'] / reference['median']:.0f} | {f['rounds1']:,.0f} | {f['rounds8']:,.0f} |"
        )
    r = reference
    print(
        f"| flock(2) on a local file (the reference) | {r['count']} | {r['median']:.2f} ms | {r['p90']:.2f} ms "
        f"| {r['max']:.2f} ms | 1 | {r['rounds1']:,.0f} | {r['rounds8']:,.0f} |"
    )


if __name__ == "__main__":
    main()
