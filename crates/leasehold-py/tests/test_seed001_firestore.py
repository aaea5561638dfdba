"""Seed 001's own Firestore lease code (tests/seed001/seed.py, verbatim from
the article), raced where its flaws show, against the Firestore emulator:
the baseline that leasehold's Firestore store is to be put next to.

The seed takes, renews and releases its lease in Firestore transactions,
but judges expiry by each client's own clock (`time.time()` against an
`expires_at` the last writer computed), notices a lost lease only at its
next heartbeat (then `os._exit(75)`), and gates its push on the highest
fencing token that passed the gate — checked before the push, not by
whatever the push writes to. Each race forces one interleaving with
SIGSTOP/SIGCONT and files the racers wait for (not luck), and asserts what
the seed does there, counted by an independent judge (seed001/ledger.py)
from a ledger the racers write around the seed's calls. The counts go to
target/seed001/results.json, by race.

Every racer is a process (seed001/racer.py) with its own client, as the
article's agents are; the emulator is the session's (conftest.Firestore),
each race in a project of its own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from conftest import REPO, Firestore
from seed001 import ledger

SEED001 = Path(__file__).resolve().parent / "seed001"
RESULTS = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "seed001" / "results.json"

# The article's 90 s TTL and 30 s heartbeat, scaled down (the same 3:1).
TTL = 1.5
HEARTBEAT = 0.5


def wait_until(what: Callable[[], bool], limit: float, why: str) -> None:
    give_up = time.monotonic() + limit
    while not what():
        if time.monotonic() > give_up:
            raise AssertionError(f"not within {limit} s: {why}")
        time.sleep(0.01)


class Race:
    """The racers of one race, their ledger and their files. The racers
    run seed001/racer.py (the seed's code), or another racer script that
    writes the same ledger (test_seed001_leasehold.py's), whose results
    go under `side` in the results file."""

    def __init__(
        self,
        emulator: Optional[Firestore],
        dir: Path,
        name: str,
        racer: str = "racer.py",
        side: Optional[str] = None,
    ) -> None:
        """`emulator`: the Firestore emulator the racers use, in a project
        of this race's own; None for leasehold's racers on another store
        (their URL says where)."""
        if racer == "racer.py" and importlib.util.find_spec("google.cloud.firestore") is None:
            pytest.fail("google-cloud-firestore is not installed: pip install -r tests/requirements.txt")
        self.name = name
        self.dir = dir
        self.project = emulator.unique_project() if emulator is not None else None
        self.env = {**os.environ, **(emulator.env(self.project) if emulator is not None else {})}
        self.ledger = dir / "ledger.jsonl"
        self.racers: dict[str, subprocess.Popen[bytes]] = {}
        self.started = time.monotonic()
        self.ttl, self.heartbeat = TTL, HEARTBEAT
        self.script, self.side = SEED001 / racer, side

    def start(
        self, racer: str, wrapper: tuple[str, ...] = (), env: Optional[dict[str, str]] = None, **config: Any
    ) -> subprocess.Popen[bytes]:
        """Start `racer` with `config`; under `wrapper` (a command that
        runs the rest, as `faketime`), with `env` added."""
        config = {"ledger": str(self.ledger), "racer": racer, "ttl": self.ttl, "heartbeat": self.heartbeat, **config}
        with open(self.dir / f"{racer}.log", "wb") as log:
            process = subprocess.Popen(
                [*wrapper, sys.executable, str(self.script), json.dumps(config)],
                cwd=SEED001, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.racers[racer] = process
        return process

    def records(self) -> list[dict[str, Any]]:
        return ledger.read(self.ledger) if self.ledger.exists() else []

    def records_so_far(self) -> list[dict[str, Any]]:
        """The ledger while racers still append to it: a line being
        written may be read half-way (a read is not atomic with another
        process's write(2)), so only whole lines — up to the last newline —
        count. The judgement, once every racer has exited, reads it all
        (`records`): a half line then is evidence, not noise."""
        if not self.ledger.exists():
            return []
        text = self.ledger.read_text()
        return ledger.parse(text[: text.rfind("\n") + 1])

    def has(self, racer: str, event: str, **fields: Any) -> bool:
        return any(
            r["racer"] == racer and r["event"] == event and all(r.get(k) == v for k, v in fields.items())
            for r in self.records_so_far()
        )

    def holder(self, skewed: bool) -> Optional[str]:
        """A racer (r2..r7 unless `skewed`) that holds the repository now,
        as far as the ledger says: acquired and not yet released."""
        held: dict[str, bool] = {}
        for r in self.records_so_far():
            if r["event"] == "acquire" and r["token"] is not None:
                held[r["racer"]] = True
            elif r["event"] in ("release", "crash"):
                held[r["racer"]] = False
        return next((racer for racer, h in held.items() if h and (skewed or racer not in ("r0", "r1"))), None)

    def wait_for(self, racer: str, event: str, limit: float = 60, **fields: Any) -> None:
        process = self.racers[racer]

        def seen() -> bool:
            if self.has(racer, event, **fields):
                return True
            if process.poll() is not None:
                raise AssertionError(f"{racer} exited ({process.returncode}) before `{event}`: {self.log(racer)}")
            return False

        wait_until(seen, limit, f"{racer}: {event} {fields}")

    def wait_exit(self, racer: str, limit: float = 60) -> int:
        try:
            return self.racers[racer].wait(limit)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{racer} still runs after {limit} s: {self.log(racer)}") from None

    def eight_racers(
        self,
        config: Callable[[str], dict[str, Any]],
        enough: Callable[[], bool],
        ready: Callable[[], None] = lambda: None,
    ) -> None:
        """r0..r7 race for the repository with `config(racer)` added,
        attempts about 1 s apart, each holding 1.5 s (a TTL of 3 s): r0
        starts once a racer of r2..r7 holds (not by luck) and makes
        attempts until `enough()` says the race has shown what it is for
        (at most 180 s: a CI run's whole suite once saw none in 90 s, where
        alone it takes ten; a failure says what each racer did); the others make attempts until r0 has exited,
        however long contention keeps them from holding. Neither side has
        a fixed window: on a loaded machine the emulator's contention can
        make every attempt of a few seconds fail (a fixed 6 s once ended
        with no holding of r0 at all). `ready` runs once all are ready.
        Returns when r0 has exited and the others are told to stop."""
        self.ttl, self.heartbeat = 3.0, 1.0
        start, ahead, enough_file, stop = (self.dir / f for f in ("start", "start-ahead", "enough", "stop"))
        for i in range(8):
            racer = f"r{i}"
            window = {"start": str(ahead), "stop": str(enough_file)} if racer == "r0" else {"start": str(start), "stop": str(stop)}
            self.start(racer, hold=1.5, retry=1.0, duration=300.0, **window, **config(racer))
        for racer in self.racers:
            self.wait_for(racer, "ready")
        ready()
        start.touch()
        wait_until(lambda: self.holder(skewed=False) is not None, 60, "a racer with a true clock holds")
        ahead.touch()
        try:
            wait_until(enough, 180, "the race showed what it is for")
        except AssertionError as e:
            raise AssertionError(f"{e}; {self.summary()}") from None
        enough_file.touch()
        self.wait_exit("r0", limit=120)
        stop.touch()

    def newcomer_publishes_while_holder_paused(self, at: str, **holder: Any) -> None:
        """The interleaving of the takeover races: the holder stopped
        (SIGSTOP) at its pause point `at`, past its TTL; a newcomer takes
        over and publishes; then the holder is let go and resumed. The
        caller waits for the holder and judges."""
        go, newcomer_start = self.dir / "go", self.dir / "newcomer-start"
        self.start("holder", pause_at=at, go=str(go), **holder)
        self.start("newcomer", hold=0.1, start=str(newcomer_start))
        self.wait_for("holder", "at", point=at)
        self.racers["holder"].send_signal(signal.SIGSTOP)
        self.wait_for("newcomer", "ready")
        time.sleep(TTL + 0.3)  # the paused holder's lease expires
        newcomer_start.touch()
        assert self.wait_exit("newcomer") == 0
        assert self.has("newcomer", "publish")
        go.touch()
        self.racers["holder"].send_signal(signal.SIGCONT)

    def summary(self) -> str:
        """What each racer did so far, by event, and the end of r0's log:
        what a race that showed nothing needs to be understood."""
        counts: dict[str, dict[str, int]] = {}
        for r in self.records_so_far():
            by_event = counts.setdefault(r["racer"], {})
            by_event[r["event"]] = by_event.get(r["event"], 0) + 1
        return f"events by racer: {counts}; r0's log: {self.log('r0')[-1500:]}"

    def log(self, racer: str) -> str:
        return (self.dir / f"{racer}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for process in self.racers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait()

    def judge(self, **notes: Any) -> dict[str, int]:
        """The judge's counts, printed and recorded in the results file."""
        counts = ledger.judge(self.records(), self.ttl)
        exits = {racer: p.returncode for racer, p in self.racers.items()}
        entry = {
            "counts": counts,
            "violations": ledger.violations(counts),
            "exits": exits,
            "ttl_seconds": self.ttl,
            "heartbeat_seconds": self.heartbeat,
            "seconds": round(time.monotonic() - self.started, 2),
            **notes,
        }
        print(f"seed 001, {self.side or 'seed'}, {self.name}: {json.dumps(entry)}")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results.setdefault("seed", "001 (tests/seed001/seed.py, the article's code)")
        if self.side is None:
            results.setdefault("races", {})[self.name] = entry
        else:
            results.setdefault(self.side, {}).setdefault("races", {})[self.name] = entry
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        return counts


@pytest.fixture
def race(request: pytest.FixtureRequest, firestore_emulator: Firestore, tmp_path: Path) -> Iterator[Race]:
    r = Race(firestore_emulator, tmp_path, request.node.name.removeprefix("test_seed001_"))
    try:
        yield r
    finally:
        r.stop()


def test_seed001_eight_racers_with_skewed_clocks(race: Race) -> None:
    """Eight agents run the seed's `run()` over and over on one
    repository; two have their clocks wrong by 10 s (one ahead, one
    behind), as an unsynchronised sandbox may. The one ahead finds every
    lease expired and takes it over; the one behind writes leases that
    everyone else finds already expired. The victims keep working (and
    publishing) until their next heartbeat notices. The one ahead starts
    once another racer holds the repository (not by luck).

    The emulator makes contending transactions on one document wait for
    each other, about 2 s each time, and the seed's client gives up after
    5 (`ValueError: Failed to commit transaction in 5 attempts`, which the
    seed does not catch): a TTL of 3 s here, attempts about 1 s apart,
    and errors counted apart from the violations."""
    skews = {"r0": 10.0, "r1": -10.0}
    race.eight_racers(
        lambda racer: {"skew": skews.get(racer, 0.0)},
        enough=lambda: ledger.judge(race.records_so_far(), race.ttl)["overlaps"] >= 1,
    )
    for racer in race.racers:
        race.wait_exit(racer)
    counts = race.judge(skews=skews)
    assert counts["overlaps"] >= 1
    assert counts["tokens_twice"] == 0  # the transactions serialise the token
    assert ledger.violations(counts) >= 1


def test_seed001_a_paused_holder_resumes_after_the_newcomer_published(race: Race) -> None:
    """The holder is paused (SIGSTOP) in its work, past its TTL; a newcomer
    takes the repository over, works and publishes; the holder resumes.
    It goes on working in its own copy after the newcomer took over (until
    its heartbeat notices), but its publish is refused at the gate, or the
    heartbeat ends it first: the gate holds when the newcomer published
    before the late holder reached it."""
    race.newcomer_publishes_while_holder_paused("work", hold=0.2)
    race.wait_exit("holder")
    refused = race.has("holder", "refused")
    counts = race.judge(holder_ended="refused at the gate" if refused else "by its heartbeat (exit 75)")
    assert counts["stale_publishes"] == 0
    assert counts["late_local_writes"] >= 1
    assert counts["overlaps"] >= 1


def test_seed001_a_renewal_after_expiry_with_a_clock_stepped_back(race: Race) -> None:
    """The holder stalls (SIGSTOP) past its TTL, and meanwhile its clock is
    stepped back 10 s (an NTP correction). Resumed, its heartbeat renews —
    and the seed accepts the renewal, judging `expires_at <= now` by the
    holder's own clock, though the lease had expired by the store's. The
    renewed lease is written already expired for every true clock: a
    newcomer takes it over at once, while the holder, just renewed, works
    on until its next heartbeat."""
    go, skew, newcomer_start = race.dir / "go", race.dir / "skew", race.dir / "newcomer-start"
    race.start("holder", pause_at="work", go=str(go), hold=1.5, skew_file=str(skew))
    race.start("newcomer", hold=0.1, start=str(newcomer_start))
    race.wait_for("holder", "at", point="work")
    race.wait_for("newcomer", "ready")
    race.racers["holder"].send_signal(signal.SIGSTOP)
    time.sleep(TTL + 0.5)
    skew.write_text("-10")
    go.touch()
    race.racers["holder"].send_signal(signal.SIGCONT)
    race.wait_for("holder", "renew", ok=True)
    newcomer_start.touch()
    race.wait_exit("newcomer")
    race.wait_exit("holder")
    counts = race.judge(clock_step_seconds=-10)
    assert counts["late_renewals"] >= 1
    assert counts["overlaps"] >= 1


def test_seed001_a_renewal_after_expiry_with_a_true_clock_is_refused(race: Race) -> None:
    """The same stall without the clock step: the seed refuses the late
    renewal and its heartbeat ends the holder (exit 75) — the check is
    right when the clocks are."""
    go = race.dir / "go"
    race.start("holder", pause_at="work", go=str(go), hold=1.5)
    race.wait_for("holder", "at", point="work")
    race.racers["holder"].send_signal(signal.SIGSTOP)
    time.sleep(TTL + 0.5)
    go.touch()
    race.racers["holder"].send_signal(signal.SIGCONT)
    assert race.wait_exit("holder") == 75
    counts = race.judge()
    assert race.has("holder", "renew", ok=False)
    assert counts["late_renewals"] == 0
    assert ledger.violations(counts) == 0


def test_seed001_a_late_publish_through_the_gate(race: Race) -> None:
    """The holder passes `guarded_publish`'s gate and is paused (SIGSTOP)
    before its `do_write`, past its TTL; a newcomer takes over, passes the
    gate with the next token and publishes; the holder resumes and
    publishes too — after the newcomer, with the older token: the gate was
    checked before the write, and nothing checks the write itself."""
    race.newcomer_publishes_while_holder_paused("push")
    race.wait_exit("holder")
    counts = race.judge()
    assert counts["stale_publishes"] >= 1
