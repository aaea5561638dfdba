"""One racer of tests/test_seed001_firestore.py: a process running seed
001's own `run()` (seed.py, verbatim) against the Firestore emulator, with
what the article leaves to the reader — `clone_repo`, `write_article` and
the push — as a stand-in that writes to the ledger, and every call of the
seed's lease functions recorded in the ledger around the call.

    python racer.py CONFIG_JSON

The ledger is the race's evidence, judged by ledger.py without the seed's
code: one JSON line per event, each written with one write(2) on an
O_APPEND descriptor (whole lines, never interleaved across racers), with
this host's true wall clock (racing.py's `true_time`, the kernel's — the
emulator runs on the same host, so it is the emulator's clock too). A
racer whose clock is wrong has it wrong for the seed's code only: `time` in
seed.py is replaced by a skewed clock, read again at every call (a clock
stepped while the racer runs is a new skew written to `skew_file`).

CONFIG_JSON:
    ledger       the ledger file
    racer        this racer's name (and the seed's owner: RUN_ID)
    ttl, heartbeat   seed.LEASE_TTL and seed.HEARTBEAT, in seconds
    skew         seconds added to the seed's clock (default 0)
    skew_file    a file holding that number, read at every clock read
    hold         seconds of work under the lease (a "work" line every 50 ms)
    pause_at     "work" or "push": record "at", then wait for `go` to exist
    go           the file that lets a racer paused at `pause_at` go on
    start        a file to wait for before the first attempt
    duration     run attempts for this long after the start (else one attempt),
                 `retry` seconds apart (0.25 by default, ±50 % at random,
                 the first after up to `retry`);
    stop         with `duration`: a file whose existence ends the attempts;
                 an attempt that raises is recorded and the next one made, as
                 the article's "upper retry" would
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any, Optional

from racing import CONFIG, Holding, pause_point, race, record, sleep, true_time

os.environ["RUN_ID"] = CONFIG["racer"]  # the seed's OWNER, read on import

# After RUN_ID; untyped, as the article wrote it.
seed: Any = importlib.import_module("seed")


class SkewedClock:
    """The seed's `time`: this host's clock, off by the racer's skew."""

    def time(self) -> float:
        skew = float(CONFIG.get("skew", 0.0))
        if "skew_file" in CONFIG and os.path.exists(CONFIG["skew_file"]):
            skew = float(Path(CONFIG["skew_file"]).read_text())
        return true_time() + skew


# What the article leaves undefined: the work under the lease.
class Repo:
    def push(self) -> None:
        """The shared write: reached only through the seed's gate."""
        pause_point("push")
        record("publish", token=Holding.token, t=true_time())


def clone_repo() -> Repo:
    return Repo()


def write_article(repo: Repo) -> None:
    """Work in this run's own clone (not shared), for `hold` seconds."""
    pause_point("work")
    end = time.monotonic() + float(CONFIG.get("hold", 0.0))
    while True:
        record("work", token=Holding.token, t=true_time())
        if time.monotonic() >= end:
            return
        sleep(0.05)


# The seed's lease functions, each recorded around the call.
seed_try_acquire, seed_renew, seed_release = seed.try_acquire, seed.renew, seed.release


def try_acquire(resource_id: str, owner: str) -> Optional[int]:
    t0 = true_time()
    try:
        token: Optional[int] = seed_try_acquire(resource_id, owner)
    except Exception as e:
        record("error", call="try_acquire", why=f"{type(e).__name__}: {e}", t0=t0, t1=true_time())
        raise
    record("acquire", token=token, t0=t0, t1=true_time())
    Holding.token = token
    return token


def renew(resource_id: str, owner: str) -> bool:
    # An exception here ends the seed's heartbeat thread (not the process):
    # the holder then works on with no heartbeat at all.
    t0 = true_time()
    try:
        ok: bool = seed_renew(resource_id, owner)
    except Exception as e:
        record("error", call="renew", token=Holding.token, why=f"{type(e).__name__}: {e}", t0=t0, t1=true_time())
        raise
    record("renew", ok=ok, token=Holding.token, t0=t0, t1=true_time())
    return ok


def release(resource_id: str, owner: str) -> None:
    t0 = true_time()
    seed_release(resource_id, owner)
    record("release", token=Holding.token, t0=t0, t1=true_time())


seed.try_acquire, seed.renew, seed.release = try_acquire, renew, release
seed.clone_repo, seed.write_article = clone_repo, write_article
seed.LEASE_TTL, seed.HEARTBEAT = CONFIG["ttl"], CONFIG["heartbeat"]
seed.time = SkewedClock()


def attempt() -> None:
    Holding.token = None
    try:
        seed.run()
    except seed.StaleFencingError as e:
        record("refused", token=Holding.token, t=true_time(), why=str(e))
    except Exception as e:
        record("crash", token=Holding.token, t=true_time(), why=f"{type(e).__name__}: {e}")
        if "duration" not in CONFIG:
            raise


def main() -> None:
    # The client's first call opens its channel (a second or more here):
    # done before the start, so the racers start even.
    seed.db.collection("warm-up").document(CONFIG["racer"]).get()
    race(attempt)


if __name__ == "__main__":
    main()
