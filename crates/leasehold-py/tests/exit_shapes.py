"""One child interpreter of test_exit.py: SHAPE leaves a leasehold call
blocked (or just finished) on another thread and returns from the main
thread, so the interpreter finalizes while it is there. Exit 0 is the
whole check; a crash at exit is 139 (SIGSEGV) or 134 (SIGABRT).

    python exit_shapes.py SHAPE DIR

DIR holds the SQLite store and the lock file; the holder it waits behind
is this process's own main thread (it holds and never lets go)."""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import sys
import threading
import time

import pyleasehold as lh

shape, where = sys.argv[1], sys.argv[2]
store = lh.Store("sqlite:///" + os.path.join(where, "store.db"))
started = threading.Event()
threads = []


def blocked(call) -> None:  # type: ignore[no-untyped-def]
    """Start `call` on a daemon thread, and give it time to block."""

    def body() -> None:
        started.set()
        call()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    threads.append(thread)
    started.wait()
    time.sleep(0.3)


if shape == "lease-wait":
    held = store.lease("x", ttl="30s").acquire()
    blocked(lambda: store.lease("x", ttl="30s", wait=True).acquire())
elif shape == "lock-wait":
    path = os.path.join(where, "lock")
    mine = lh.lock(path)
    blocked(lambda: lh.lock(path, wait=True))
elif shape == "campaign":
    leader = store.campaign("x", id="a", ttl="30s")
    blocked(lambda: store.campaign("x", id="b", ttl="30s", wait=True))
elif shape == "run":
    held = store.lease("x", ttl="30s").acquire()
    blocked(lambda: store.run("x", ["true"], ttl="30s", wait=True))
elif shape == "run-running":
    blocked(lambda: store.run("x", ["sleep", "30"], ttl="30s"))
elif shape == "claim-wait":
    blocked(lambda: store.queue("q").claim(ttl="30s", wait=True))
elif shape == "asyncio-cancelled":
    held = store.lease("x", ttl="30s").acquire()

    async def waiter() -> None:
        async with store.lease("x", ttl="30s", wait=True):
            pass

    async def main() -> None:
        waits = [asyncio.wait_for(waiter(), 0.2) for _ in range(50)]
        results = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(r, asyncio.TimeoutError) for r in results), results

    asyncio.run(main())
elif shape == "asyncio-done":

    async def one(i: int) -> None:
        async with store.lease(f"x{i}", ttl="30s", wait=True):
            pass

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(200)))

    asyncio.run(main())
elif shape == "asyncio-lock-claim-cancelled":
    # Waits standing in lines (aio.rs) — a lock's and a queue's — given
    # up together; their heads end at their next poll, maybe at exit.
    path = os.path.join(where, "lock")
    mine = lh.lock(path)
    q = store.queue("q")

    async def locker() -> None:
        async with lh.alock(path, wait=True):
            pass

    async def claimer() -> None:
        async with q.aclaim(ttl="30s", wait=True):
            pass

    async def main() -> None:
        waits = [asyncio.wait_for(locker(), 0.2) for _ in range(30)]
        waits += [asyncio.wait_for(claimer(), 0.2) for _ in range(20)]
        results = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(r, asyncio.TimeoutError) for r in results), results

    asyncio.run(main())
else:
    sys.exit(f"exit_shapes.py: no shape {shape!r}")


class SlowTeardown:
    """Finalization as long as a larger program's (the bug needs a thread
    to try to take the GIL while the interpreter finalizes; a small script
    finalizes within one 50 ms poll): made garbage by the last atexit hook
    with the collector off, it is collected while the interpreter
    finalizes, and its sleep lets go of the GIL for every thread that
    waits for it."""

    me: object = None

    def __del__(self) -> None:
        time.sleep(0.3)


def slow_teardown() -> None:
    gc.disable()
    cycle = SlowTeardown()
    cycle.me = cycle


atexit.register(slow_teardown)
if not all(t.is_alive() for t in threads):
    sys.exit(f"exit_shapes.py: the {shape} call did not stay blocked until the main thread returned")
print("ready", flush=True)
