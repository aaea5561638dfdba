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
it). A racer whose clock is wrong runs under libfaketime (the whole
process — leasehold's clock is in Rust); the ledger keeps the kernel's
true time, and waits are not `time.sleep` (racing.py says why).

CONFIG_JSON: as racer.py's (ledger, racer, ttl, heartbeat, hold, pause_at,
go, start, duration, stop, retry), and
    url          the store
    gate         the gate: a fenced state file
    skip_fence   the planted bug: publish without `store.fence`, and
                 without `on_lost="interrupt"` (which otherwise stops a
                 resumed holder before its push as often as not: the
                 keeper finds the trust window closed)
"""

from __future__ import annotations

import threading
import time
from typing import Literal, Optional

import pyleasehold as lh
from racing import CONFIG, Holding, pause_point, race, record, sleep, true_time

NAME = "gemilab-repo"


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
    on_lost: Optional[Literal["interrupt"]] = None if CONFIG.get("skip_fence") else "interrupt"
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
    race(lambda: attempt(store), clock_offset=round(time.time() - true_time(), 1))


if __name__ == "__main__":
    main()
