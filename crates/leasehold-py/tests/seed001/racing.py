"""What both racers share (racer.py runs seed 001's code, leasehold_racer.py
leasehold's): their configuration, the ledger they write, the pause points
a race holds them at, and the loop of attempts.

The ledger's times are this host's true wall clock, read with the
clock_gettime system call itself: a racer whose clock is wrong runs under
libfaketime (leasehold's racer: the whole process) or a skewed clock in
the seed's module (the seed's racer), neither of which reaches a raw
system call. Waits are on an Event: under libfaketime with
FAKETIME_DONT_FAKE_MONOTONIC=1, `time.sleep` fails with EINVAL
(libfaketime 0.9.10 and Python's absolute monotonic sleeps).
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
from typing import Any, Callable, Optional

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
LEDGER = os.open(CONFIG["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

_libc = ctypes.CDLL(None, use_errno=True)
_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}[platform.machine()]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def true_time() -> float:
    """CLOCK_REALTIME from the kernel."""
    ts = _Timespec()
    if _libc.syscall(_CLOCK_GETTIME, 0, ctypes.byref(ts)) != 0:
        raise OSError(ctypes.get_errno(), "clock_gettime")
    return float(ts.sec) + float(ts.nsec) / 1e9


def record(event: str, **fields: Any) -> None:
    """One ledger line, written with one write(2) on an O_APPEND
    descriptor: whole lines, never interleaved across racers."""
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
    """The token of the grant this racer holds."""

    token: Optional[int] = None


def pause_point(point: str) -> None:
    """At the configured `pause_at`: record "at", then wait for `go`."""
    if CONFIG.get("pause_at") == point:
        record("at", point=point, token=Holding.token, t=true_time())
        wait_for_file(CONFIG["go"])


def race(attempt: Callable[[], None], **ready: Any) -> None:
    """Say "ready" (with `ready`'s fields), wait for `start` if given, then
    make one attempt — or attempts for `duration` seconds (or until the
    file `stop` exists, if given, whichever comes first), `retry` seconds
    apart (±50 % at random, the first after up to `retry`: agents started
    together do not call within the same millisecond) — and say "exit"."""
    record("ready", t=true_time(), **ready)
    if "start" in CONFIG:
        wait_for_file(CONFIG["start"])
    if "duration" not in CONFIG:
        attempt()
    else:
        until = time.monotonic() + float(CONFIG["duration"])
        retry = float(CONFIG.get("retry", 0.25))
        sleep(retry * random.uniform(0.0, 1.0))
        stop = CONFIG.get("stop")
        while time.monotonic() < until and not (stop and os.path.exists(stop)):
            attempt()
            sleep(retry * random.uniform(0.5, 1.5))
    record("exit", token=Holding.token, t=true_time())
