"""The judge of a race's ledger (seed001/racer.py writes it): what the
racers did, by this host's true wall clock, judged without the code under
test — the same judge can read a ledger of leasehold's racers.

A holding is one grant, from the end of the call that returned its token
(the grant was made before then) to the holding's last recorded act (its
release, or the last thing it did before it ended) — for a call, its start
(the holder was still acting then; when the call took effect between its
start and its end the ledger cannot tell). A refusal is no act: a refused
renewal, gate or fence wrote nothing, and a holder told at once that its
lease was lost did nothing. The counts are conservative: an overlap, a
stale write or a late renewal is counted only when the ledger's times
prove it, whatever the calls' latency.

- overlaps: pairs of holdings of which the newer was granted before the
  older's last act;
- tokens_twice: tokens granted more than once;
- stale_publishes: shared writes (`publish`) made with a token after a
  newer token had been granted — a write accepted from a holder whose
  lease had passed on;
- late_local_writes: the same for a holder's work in its own copy (not
  shared: shown, not a violation);
- late_renewals: renewals that succeeded though they were sent more than
  the TTL after the end of the holding's last successful acquire or
  renewal — after the lease had expired by the clock of the store (this
  host's).

And, not violations: errors (calls of the code under test that raised —
the emulator's transactions time out under contention) and crashes
(attempts that ended on an exception).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def read(path: Path) -> list[dict[str, Any]]:
    return parse(path.read_text())


def parse(text: str) -> list[dict[str, Any]]:
    """The records of a ledger's text, a JSON document a line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def acted(r: dict[str, Any]) -> float:
    """When the holder certainly still acted: a call's start."""
    return float(r["t0"] if "t0" in r else r["t"])


def refusal(r: dict[str, Any]) -> bool:
    return r["event"] == "refused" or (r["event"] == "renew" and not r["ok"])


@dataclass
class Holding:
    racer: str
    token: int
    start: float
    end: float
    renewed: list[float] = field(default_factory=list)


def holdings(records: list[dict[str, Any]]) -> list[Holding]:
    found: dict[tuple[str, int], Holding] = {}
    for r in records:
        if r["event"] == "acquire" and r["token"] is not None:
            found[(r["racer"], r["token"])] = Holding(r["racer"], r["token"], r["t1"], r["t1"])
    for r in records:
        h = found.get((r["racer"], r.get("token")))  # type: ignore[arg-type]
        if h is not None and r["event"] in ("work", "publish", "renew", "release", "at", "error", "crash"):
            if not refusal(r):
                h.end = max(h.end, acted(r))
    return sorted(found.values(), key=lambda h: h.token)


def judge(records: list[dict[str, Any]], ttl: float) -> dict[str, int]:
    held = holdings(records)
    granted = [(r["t1"], r["token"]) for r in records if r["event"] == "acquire" and r["token"] is not None]

    def superseded(token: int, t: float) -> bool:
        return any(newer > token and at < t for at, newer in granted)

    overlaps = sum(1 for i, old in enumerate(held) for new in held[i + 1 :] if new.start < old.end)
    twice = sum(1 for n in Counter(token for _, token in granted).values() if n > 1)
    stale = sum(1 for r in records if r["event"] == "publish" and superseded(r["token"], r["t"]))
    local = sum(1 for r in records if r["event"] == "work" and superseded(r["token"], r["t"]))
    late = 0
    for h in held:
        valid_from = [h.start]
        for r in sorted(records, key=lambda r: float(r.get("t0", r.get("t", 0)))):
            if r["event"] == "renew" and r["racer"] == h.racer and r["token"] == h.token and r["ok"]:
                if r["t0"] > max(t for t in valid_from if t <= r["t0"]) + ttl:
                    late += 1
                valid_from.append(r["t1"])
    return {
        "overlaps": overlaps,
        "tokens_twice": twice,
        "stale_publishes": stale,
        "late_local_writes": local,
        "late_renewals": late,
        "errors": sum(1 for r in records if r["event"] == "error"),
        "crashes": sum(1 for r in records if r["event"] == "crash"),
    }


NOT_VIOLATIONS = ("late_local_writes", "errors", "crashes")


def violations(counts: dict[str, int]) -> int:
    """The violations among the counts (a late write in one's own copy, an
    error or a crash is none)."""
    return sum(n for what, n in counts.items() if what not in NOT_VIOLATIONS)
