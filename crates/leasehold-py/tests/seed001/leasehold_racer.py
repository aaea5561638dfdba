"""One racer of tests/test_seed001_leasehold.py: seed 001's agent run
(`run()` in seed.py — take the repository, work in a clone, publish through
the gate) done with leasehold instead of the seed's lease code, against the
same Firestore emulator, writing the same ledger as seed001/racer.py, for
the same judge (ledger.py).

    python leasehold_racer.py CONFIG_JSON

The run, as docs/PYTHON.md's `guarded_publish.py` writes it:

    with store.lease("gemilab-repo", ttl=TTL, heartbeat=HEARTBEAT, on_lost="interrupt") as lease:
        work, each step after lease.check()
        lh.write_json(gate, {"fencing": lease.token}, fence=lease)   # the gate
        store.fence("gemilab-repo", lease)                            # at the write itself
        publish

`lh.Held` is a refused acquire (an "acquire" with no token, as the seed's
`None`); `lh.LeaseLost` (from `check()`, the interrupt, a renewal or
leaving the block) and `lh.StaleToken` (the gate or the fence) end the
attempt as "refused" at that point. Renewals are leasehold's keeper's
(`heartbeat=`); the racer also renews from a thread of its own every
`heartbeat`, as the seed's heartbeat does, so that the ledger has
renewals, each recorded around the call (`ok`: whether the store renewed
it). The ledger's times are this host's true wall clock, read with the
clock_gettime system call itself: a racer whose clock is wrong runs under
libfaketime (the whole process — leasehold's clock is in Rust), which
changes what the C library answers, not the kernel.

Under libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1 (as the Rust tests
run it), `time.sleep` fails with EINVAL (libfaketime 0.9.10 and Python's
absolute monotonic sleeps): this racer waits on an Event instead.

CONFIG_JSON: as racer.py's (ledger, racer, ttl, heartbeat, hold, pause_at,
go, start, duration, retry), and
    url          the store
    gate         the gate: a fenced state file
    skip_fence   the planted bug: publish without `store.fence`, and
                 without `on_lost="interrupt"` (which otherwise stops a
                 resumed holder before its push as often as not: the
                 keeper finds the trust window closed)
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import random
import sys
import threading
import time
from typing import Any, Optional

import leasehold as lh

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
NAME = "gemilab-repo"
LEDGER = os.open(CONFIG["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

_libc = ctypes.CDLL(None, use_errno=True)
_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}[platform.machine()]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def true_time() -> float:
    """CLOCK_REALTIME from the kernel (libfaketime does not reach a raw
    system call)."""
    ts = _Timespec()
    if _libc.syscall(_CLOCK_GETTIME, 0, ctypes.byref(ts)) != 0:
        raise OSError(ctypes.get_errno(), "clock_gettime")
    return ts.sec + ts.nsec / 1e9


def record(event: str, **fields: Any) -> None:
    line = json.dumps({"racer": CONFIG["racer"], "event": event, **fields}) + "\n"
    os.write(LEDGER, line.encode())


def sleep(seconds: float) -> None:
    threading.Event().wait(seconds)


def wait_for_file(path: str, limit: float = 120.0) -> None:
    give_up = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > give_up:
            record("gave-up", waiting_for=path)
            os._exit(3)
        sleep(0.01)


class Holding:
    token: Optional[int] = None


def pause_point(point: str) -> None:
    if CONFIG.get("pause_at") == point:
        record("at", point=point, token=Holding.token, t=true_time())
        wait_for_file(CONFIG["go"])


def heartbeat(lease: lh.Lease, stop: threading.Event) -> None:
    """The seed's heartbeat, done with `lease.renew()`: every `heartbeat`
    seconds, recorded around the call, until stopped or refused."""
    while not stop.wait(float(CONFIG["heartbeat"])):
        t0 = true_time()
        try:
            lease.renew()
        except (lh.LeaseLost, lh.InvalidInput) as e:
            # Refused: the store's answer, or the keeper had found the
            # grant lost already (then nothing was sent).
            record("renew", ok=False, token=Holding.token, t0=t0, t1=true_time(), why=f"{type(e).__name__}: {e}")
            return
        except Exception as e:
            record("error", call="renew", token=Holding.token, why=f"{type(e).__name__}: {e}", t0=t0, t1=true_time())
            return
        record("renew", ok=True, token=Holding.token, t0=t0, t1=true_time())


def run(store: lh.Store) -> None:
    """One agent run under leasehold."""
    Holding.token = None
    on_lost = None if CONFIG.get("skip_fence") else "interrupt"
    lease = store.lease(NAME, ttl=CONFIG["ttl"], heartbeat=CONFIG["heartbeat"], on_lost=on_lost)
    t0 = true_time()
    try:
        lease.acquire()
    except lh.Held:
        record("acquire", token=None, t0=t0, t1=true_time())
        return
    Holding.token = lease.token
    record("acquire", token=lease.token, t0=t0, t1=true_time())
    stop = threading.Event()
    beat = threading.Thread(target=heartbeat, args=(lease, stop), daemon=True)
    beat.start()
    try:
        # write_article: work in this run's own clone.
        pause_point("work")
        end = time.monotonic() + float(CONFIG.get("hold", 0.0))
        while True:
            lease.check()
            record("work", token=lease.token, t=true_time())
            if time.monotonic() >= end:
                break
            sleep(0.05)
        # guarded_publish: the gate, then the write itself.
        lh.write_json(CONFIG["gate"], {"fencing": lease.token}, fence=lease)
        pause_point("push")
        if not CONFIG.get("skip_fence"):
            store.fence(NAME, lease)
        record("publish", token=lease.token, t=true_time())
    finally:
        stop.set()
        beat.join()
    t0 = true_time()
    lease.release()
    record("release", token=Holding.token, t0=t0, t1=true_time())


def attempt(store: lh.Store) -> None:
    try:
        run(store)
    except (lh.LeaseLost, lh.StaleToken) as e:
        record("refused", token=Holding.token, t=true_time(), why=f"{type(e).__name__}: {e}")
    except Exception as e:
        record("crash", token=Holding.token, t=true_time(), why=f"{type(e).__name__}: {e}")
        if "duration" not in CONFIG:
            raise


def main() -> None:
    store = lh.Store(CONFIG["url"])
    store.status("warm-up")  # the first request opens the connection
    # The racer's own clock as leasehold's code reads it (libfaketime's),
    # against the kernel's: the skew the test asked for, or none.
    record("ready", t=true_time(), clock_offset=round(time.time() - true_time(), 1))
    if "start" in CONFIG:
        wait_for_file(CONFIG["start"])
    if "duration" not in CONFIG:
        attempt(store)
    else:
        until = time.monotonic() + float(CONFIG["duration"])
        retry = float(CONFIG.get("retry", 0.25))
        sleep(retry * random.uniform(0.0, 1.0))
        while time.monotonic() < until:
            attempt(store)
            sleep(retry * random.uniform(0.5, 1.5))
    record("exit", token=Holding.token, t=true_time())


if __name__ == "__main__":
    main()
