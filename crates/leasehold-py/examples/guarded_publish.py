"""Seed 001, ported: several agent runs compete for one repository; only the
holder of the lease may publish, and a publish with a stale fencing token is
refused — even from a run that was paused past its lease and woke up late.

The original kept the lease in a Firestore document (owner, expires_at,
fencing), renewed it from a thread that called os._exit(75) on a failed
renewal, and gated the push on a second document holding the highest
fencing token. Here the lease, its heartbeat and its token are leasehold's,
and the gate is a fenced state file:

    python examples/guarded_publish.py STORE_URL GATE_FILE
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import pyleasehold as lh

LEASE_TTL = "90s"  # longer than one dangerous step, shorter than a stale run
HEARTBEAT = "30s"  # about a third of the TTL


def guarded_publish(lease: lh.Lease, gate: str, do_write: Callable[[], None]) -> None:
    """Run `do_write` only while `lease` is held and its token is not stale.

    The gate records the highest token that ever published: an older token
    is refused (lh.StaleToken) before `do_write` runs, as the Firestore gate
    refused `fencing < last`.
    """
    lease.check()  # raises lh.LeaseLost if the heartbeat lost the grant
    lh.write_json(gate, {"fencing": lease.token}, fence=lease)
    do_write()


def run(store: lh.Store, gate: str, publish: Callable[[int], None]) -> Optional[int]:
    """One agent run: returns the token it published with, or None if
    another run holds the repository."""
    try:
        with store.lease("gemilab-repo", ttl=LEASE_TTL, heartbeat=HEARTBEAT) as lease:
            # clone_repo(); write_article(repo) — the work under the lease.
            guarded_publish(lease, gate, lambda: publish(lease.token))
            return lease.token
    except lh.Held:
        print("another run holds the repository; skipping this time")
        return None


def main() -> int:
    store = lh.Store(sys.argv[1])
    token = run(store, sys.argv[2], lambda t: print(f"pushed with fencing token {t}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
