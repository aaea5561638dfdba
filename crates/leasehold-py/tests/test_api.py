"""The API as a user drives it, on SQLite, PostgreSQL, etcd, Firestore (its emulator) and Redis."""

from __future__ import annotations

import _thread
import asyncio
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, List

import pytest

import pyleasehold as lh

from conftest import Servers, block_sqlite, leasehold_cli, python, read_line, unique


def test_a_lease_excludes_others_and_its_token_only_grows(store_url: str) -> None:
    store = lh.Store(store_url)
    tokens = []
    for _ in range(3):
        with store.lease("nightly-report", ttl="2m") as lease:
            assert lease.held and not lease.lost
            lease.check()
            tokens.append(lease.token)
            with pytest.raises(lh.Held, match="nightly-report is held: exclusive by"):
                store.lease("nightly-report", ttl="2m").acquire()
        assert not lease.held
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # Released: free again at once.
    store.lease("nightly-report").acquire().release()


def test_mixed_shared_limits_keep_the_smallest(store_url: str) -> None:
    store = lh.Store(store_url)
    a = store.lease("z", ttl="1h", shared=2).acquire()
    b = store.lease("z", ttl="1h", shared=2).acquire()
    for shared in (3, True, 1):
        with pytest.raises(lh.Held, match=r"2 shared holder\(s\)"):
            store.lease("z", ttl="1h", shared=shared).acquire()
    a.release()
    c = store.lease("z", ttl="1h", shared=3).acquire()
    with pytest.raises(lh.Held, match="a holder asked for at most 2"):
        store.lease("z", ttl="1h", shared=True).acquire()
    b.release()
    c.release()


def test_wait_waits_for_the_holder(store_url: str) -> None:
    store = lh.Store(store_url)
    first = store.lease("w", ttl="30s").acquire()
    threading.Timer(0.3, first.release).start()
    started = time.monotonic()
    with store.lease("w", ttl="30s", wait="10s") as second:
        assert second.token > first.token
    assert 0.25 < time.monotonic() - started < 8
    held = store.lease("w", ttl="30s").acquire()
    with pytest.raises(lh.Held, match="still held after waiting 200ms"):
        store.lease("w", wait=0.2).acquire()
    held.release()


@pytest.mark.parametrize("store_url", ["sqlite", "postgres", "etcd", "redis"], indirect=True)
def test_threads_sharing_one_store_take_turns_one_holder_at_a_time(store_url: str) -> None:
    """Threads sharing one Store wait for one name in turn (bench/threads.py's
    shape). Checked outside the store, on this process's clock: no two
    holdings overlap, and tokens rise in the order the holdings began."""
    store = lh.Store(store_url)
    held: List[Any] = []

    def turns() -> None:
        for _ in range(10):
            with store.lease("turns", ttl="30s", wait="60s") as lease:
                began = time.monotonic()
                time.sleep(0.001)
                held.append((began, time.monotonic(), lease.token))

    threads = [threading.Thread(target=turns) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(held) == 40
    held.sort()
    for (_, ended, earlier), (began, _, later) in zip(held, held[1:]):
        assert began > ended, f"token {later} was held from before token {earlier}'s holding ended"
        assert later > earlier, f"token {later} was granted after token {earlier}: tokens must rise"


def test_shared_leases_coexist_up_to_their_limit(store_url: str) -> None:
    store = lh.Store(store_url)
    a = store.lease("s", shared=2).acquire()
    b = store.lease("s", shared=2).acquire()
    with pytest.raises(lh.Held):
        store.lease("s", shared=2).acquire()
    with pytest.raises(lh.Held):
        store.lease("s").acquire()
    a.release()
    b.release()


def test_async_with_acquires_without_blocking_the_loop(store_url: str) -> None:
    store = lh.Store(store_url)
    holder = store.lease("a", ttl="30s").acquire()

    async def main() -> List[int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            give_up = time.monotonic() + 30  # cancelled long before
            while time.monotonic() < give_up:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        asyncio.get_running_loop().call_later(0.3, holder.release)
        async with store.lease("a", ttl="30s", wait="10s") as lease:
            token = lease.token
            assert lease.held
        ticker.cancel()
        return [ticks, token]

    ticks, token = asyncio.run(main())
    assert ticks >= 10, "the event loop was blocked while waiting"
    assert token > holder.token


def test_fenced_writes_refuse_a_stale_token(store_url: str, tmp_path: Path) -> None:
    store = lh.Store(store_url)
    out = tmp_path / "report.json"
    old = store.lease("r", ttl="30s").acquire()
    old_token = old.token
    old.release()
    with store.lease("r", ttl="30s") as new:
        lh.write_atomic(out, '{"by": "new"}', fence=new)
        with pytest.raises(lh.StaleToken, match=f"stale fencing token {old_token}"):
            lh.write_atomic(out, b'{"by": "old"}', fence=old_token)
        with pytest.raises(lh.StaleToken):
            store.fence("r", old_token)
        store.fence("r", new)
    assert json.loads(out.read_text()) == {"by": "new"}


def test_fenced_writes_record_the_grant_and_refuse_a_reissued_token(store_url: str, tmp_path: Path) -> None:
    # A store restored from a backup issues a token again, to another
    # grant: a fence naming the grant refuses it (docs/STATE-FILES.md).
    store = lh.Store(store_url)
    out = tmp_path / "report.json"
    with store.lease("g", ttl="30s") as lease:
        assert len(lease.grant) == 16
        lh.write_atomic(out, "first", fence=lease)
        # The record names the lease too, as `leasehold write --fence-lease` does.
        assert (tmp_path / "report.json.fence").read_text() == f"{lease.token} {lease.grant} lease g\n"
        other = "0" * 15 + ("2" if lease.grant.endswith("1") else "1")
        reissued = types.SimpleNamespace(token=lease.token, grant=other)
        with pytest.raises(lh.StaleToken, match="issued twice"):
            lh.write_atomic(out, "reissued", fence=reissued)
        with pytest.raises(lh.StaleToken):
            store.fence("g", reissued)
        store.fence("g", lease)
        # A bare token is judged by the token alone, as before.
        lh.write_atomic(out, "token only", fence=lease.token)
    assert out.read_text() == "token only"


def test_update_json_reads_modifies_and_writes_under_a_lock(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    for runs in (1, 2, 3):
        new = lh.update_json(state, lambda s: {**s, "runs": s.get("runs", 0) + 1}, default={})
        assert new == {"runs": runs}
    assert json.loads(state.read_text()) == {"runs": 3}

    def boom(s: Any) -> Any:
        raise KeyError("no")

    with pytest.raises(KeyError):
        lh.update_json(state, boom)
    assert json.loads(state.read_text()) == {"runs": 3}, "a failed filter changed the file"
    lh.write_json(state, [1, 2])
    assert json.loads(state.read_text()) == [1, 2]


def test_durations_are_strings_numbers_or_timedeltas(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    for ttl in ("90s", "1m30s", 90, 90.0, datetime.timedelta(seconds=90)):
        with store.lease("d", ttl=ttl) as lease:
            assert lease.ttl == 90.0
    for bad in (True, "ninety", -1, float("nan")):
        with pytest.raises(lh.InvalidInput):
            store.lease("d", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.lease("d", ttl=[90])  # type: ignore[arg-type]
    with pytest.raises(lh.InvalidInput, match="between|limit|longer|at most|within"):
        store.lease("d", ttl="2y").acquire()


def test_the_exceptions_form_one_hierarchy() -> None:
    classes = [getattr(lh, n) for n in lh._errors.__all__ if n != "Holder"]
    assert all(issubclass(c, lh.Error) for c in classes)
    assert issubclass(lh.InvalidInput, ValueError) and issubclass(lh.InvalidName, lh.InvalidInput)
    assert issubclass(lh.StoreBusy, lh.StoreUnavailable)
    assert issubclass(lh.NoSuchTask, LookupError)


def test_lost_grants_are_pushed_to_lost_check_and_on_lost(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    store = lh.Store(f"sqlite://{db}")
    seen: List[lh.LeaseLost] = []
    lease = store.lease("l", ttl="1s", on_lost=seen.append).acquire()
    # Another writer keeps the store locked: renewals fail until the
    # holder-side deadline.
    blocker = block_sqlite(db, 3)
    deadline = time.monotonic() + 5
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.02)
    blocker.kill()
    assert lease.lost and not lease.held
    # The renewal was still out at the deadline: the store names the
    # process that keeps it locked, and no pause is blamed.
    with pytest.raises(
        lh.LeaseLost,
        match=f"lease l .* was lost: the holder-side deadline passed: a renewal sent .* still unanswered: "
        f"the store is locked — its write lock is held by pid {blocker.pid} ",
    ):
        lease.check()
    assert len(seen) == 1 and isinstance(seen[0], lh.LeaseLost)
    with pytest.raises(lh.LeaseLost):
        lease.release()


def test_on_lost_interrupt_stops_a_loop_that_never_checks(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    child = python(
        """
import sys, time, pyleasehold as lh
store = lh.Store("sqlite://" + sys.argv[1])
lease = store.lease("i", ttl="2s", on_lost="interrupt").acquire()
print("held", flush=True)
try:
    time.sleep(60)      # never checks; the parent gives up after 10 s
    print("never interrupted", flush=True)
except lh.LeaseLost as e:
    print(f"{time.time()} {lease.lost} {e}", flush=True)
""",
        str(db),
    )
    assert read_line(child) == "held"
    blocker = block_sqlite(db, 4)
    blocked_at = time.time()  # no renewal can succeed after this
    interrupted_at, lost, message = read_line(child, timeout=10).split(" ", 2)
    blocker.kill()
    child.wait(10)
    # Raised in the main thread before the store could have expired the
    # grant: within the TTL of the last renewal that got through.
    assert float(interrupted_at) - blocked_at < 2.0 and lost == "True", message
    assert "was lost" in message


def test_a_holder_resumed_from_a_pause_is_refused_at_its_first_check_and_told_once(tmp_path: Path) -> None:
    # The process stops itself (SIGSTOP: every thread) past its grant's
    # window and is resumed; its main thread then races its keeper's
    # threads to the clock. Whoever wins, the first check() must refuse
    # (it once passed when the main thread ran first), and the main thread
    # must hear of the loss once — not again, by the interrupt, inside the
    # handler of the first. Another thread renews all along, as seed 001's
    # heartbeat does: a renewal under way is no answer to check() either.
    # Five pauses, for the orders to occur.
    db = tmp_path / "l.db"
    child = python(
        """
import os, signal, sys, threading, time, pyleasehold as lh
store = lh.Store("sqlite://" + sys.argv[1])

def renewing(lease):
    while True:
        try:
            lease.renew()
        except (lh.LeaseLost, lh.InvalidInput):
            return

for trial in range(5):
    lease = store.lease(f"p{trial}", ttl="1s", on_lost="interrupt").acquire()
    renewer = threading.Thread(target=renewing, args=(lease,), daemon=True)
    renewer.start()
    try:
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        lease.check()
        print("passed a check after the pause", flush=True)
    except lh.LeaseLost:
        try:
            time.sleep(0.5)  # a second LeaseLost would be raised here
            print("told once", flush=True)
        except lh.LeaseLost as again:
            print(f"told twice: {again}", flush=True)
    renewer.join()
    try:
        lease.release()
    except lh.LeaseLost:
        pass
""",
        str(db),
    )
    outcomes = []
    for _ in range(5):
        assert read_line(child) == "stopping"
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the child did not stop"
            time.sleep(0.01)
        time.sleep(1.5)  # past the 1 s grant's window
        child.send_signal(signal.SIGCONT)
        outcomes.append(read_line(child, timeout=10))
    assert child.wait(10) == 0
    assert outcomes == ["told once"] * 5, outcomes


def test_a_queue_claims_runs_and_reports(queue_store_url: str) -> None:
    store = lh.Store(queue_store_url)
    q = store.queue("emails")
    assert q.add({"to": "a@b"}, id="welcome-42", priority=0, delay="10s") == "welcome-42"
    assert q.add({"to": "a@b"}, id="welcome-42") == "welcome-42", "the same task again is a no-op"
    with pytest.raises(lh.InvalidInput, match="another task"):
        q.add({"to": "c@d"}, id="welcome-42")
    with pytest.raises(lh.InvalidInput, match="priority 0, not 3"):
        q.add({"to": "a@b"}, id="welcome-42", priority=3)
    with pytest.raises(lh.NothingToClaim):
        q.claim(ttl="5m")
    q.add({"n": 1}, id="ok", priority=5)
    q.add({"n": 2}, id="bad", max_attempts=1)
    sent = []
    for task in q.claim_iter(ttl="5m", until_empty=True):
        with task:  # a failure is recorded, and the loop goes on
            assert not task.lost
            if task.id == "bad":
                raise RuntimeError("SMTP said no")
            sent.append(task.payload)
    assert sent == [{"n": 1}]
    assert q.stats() == {"pending": 1, "running": 0, "done": 1, "dead": 1}
    bad = q.get("bad")
    assert bad is not None and bad["state"] == "dead" and "SMTP said no" in str(bad)
    assert "Traceback" in str(bad), "fail() records the traceback"
    q.retry("bad")
    with pytest.raises(lh.NoSuchTask):
        q.retry("nope")
    task = q.claim(ttl="5m")
    assert (task.id, task.attempt) == ("bad", 1)
    task.release()
    task = q.claim(ttl="5m")
    assert task.attempt == 1 or task.attempt == 2
    assert task.fail("again", retry_in="1h") in ("retrying", "dead")


def test_claim_waits_for_a_task(queue_store_url: str) -> None:
    store = lh.Store(queue_store_url)
    q = store.queue("later")
    threading.Timer(0.3, lambda: q.add("hello")).start()
    started = time.monotonic()
    task = q.claim(ttl="1m", wait="10s")
    assert task.payload == "hello" and time.monotonic() - started < 8
    task.done({"ok": True})
    assert task.outcome == "done"


@pytest.mark.parametrize("kind", ["etcd", "firestore", "redis"])
def test_stores_without_a_queue_refuse_it(kind: str, servers: Servers) -> None:
    # The queue tests take `queue_store_url`, which has none of them.
    if kind == "etcd":
        store = lh.Store(servers.etcd().url("noqueue"))
    elif kind == "redis":
        store = lh.Store(servers.redis().url(unique()))
    else:
        emulator = servers.firestore()
        store = lh.Store(emulator.url(emulator.unique_project()))
    with pytest.raises(lh.Unsupported, match="task queue"):
        store.queue("q").add(1)


def test_run_supervises_a_command_under_the_lease(store_url: str, tmp_path: Path) -> None:
    store = lh.Store(store_url)
    out = tmp_path / "env"
    code = store.run("nightly-report", ["sh", "-c", f'echo "$LEASEHOLD_NAME $LEASEHOLD_TOKEN" > {out}; exit 7'], ttl="2m")
    assert code == 7
    name, token = out.read_text().split()
    assert name == "nightly-report" and int(token) > 0
    with store.lease("nightly-report"):
        with pytest.raises(lh.Held):
            store.run("nightly-report", ["true"])
    with pytest.raises(lh.Failed, match="cannot run"):
        store.run("nightly-report", ["/no/such/program"])


def test_run_stops_the_command_when_the_lease_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    store = lh.Store(f"sqlite://{db}")
    blockers = []
    threading.Timer(0.5, lambda: blockers.append(block_sqlite(db, 5))).start()
    started = time.monotonic()
    with pytest.raises(lh.LeaseLost, match="while the command ran"):
        store.run("r", ["sleep", "30"], ttl="2s")
    # Stopped, not run out: (the release then waits for the store's lock).
    assert time.monotonic() - started < 10
    blockers[0].kill()


def test_a_stall_is_the_same_outcome_as_the_clis(tmp_path: Path) -> None:
    """The library words a run's outcome once: a stalled command stopped by
    `store.run` raises `Stalled` (a `Failed`) with the very message
    `leasehold run` prints when it exits 75 for the same stall."""
    url = f"sqlite://{tmp_path / 'l.db'}"
    cli = subprocess.run(
        [leasehold_cli(), "--store", url, "run", "--ttl", "1m", "--stall-timeout", "1s", "s", "--", "sleep", "30"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert cli.returncode == 75, cli.stderr
    with pytest.raises(lh.Stalled) as raised:
        lh.Store(url).run("s", ["sleep", "30"], ttl="1m", stall_timeout="1s")
    assert isinstance(raised.value, lh.Failed) and raised.value.kind == "stalled"
    assert cli.stderr.strip() == f"leasehold: {raised.value}"
    assert "the command stalled" in str(raised.value)


def test_lock_is_the_same_flock_as_the_cli(tmp_path: Path) -> None:
    agent = tmp_path / "my-agent"
    with lh.lock(f"{agent}/") as held:
        assert held.locked and held.path == agent / ".leasehold.lock"
        with pytest.raises(lh.Held, match="locked by pid"):
            lh.lock(agent)
        done = subprocess.run(
            [leasehold_cli(), "lock", f"{agent}/", "--", "true"], capture_output=True, check=False, timeout=60
        )
        assert done.returncode == 11, done.stderr
    assert not held.locked
    with pytest.raises(lh.InvalidInput):
        lh.lock(str(agent / ".leasehold.lock") + "/")
    # A missing path is the lock file itself, in a directory that must exist.
    with lh.lock(tmp_path / "backup.lock") as f:
        assert f.path == tmp_path / "backup.lock"
    with pytest.raises(lh.Failed, match="does not exist|missing|no such"):
        lh.lock(tmp_path / "nope" / "x.lock")
    home = os.environ["HOME"]
    with lh.lock("~/") as in_home:
        assert str(in_home.path) == os.path.join(home, ".leasehold.lock")


def test_lock_leaves_a_file_it_did_not_create_byte_identical(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    an_hour_ago = time.time() - 3600
    os.utime(data, (an_hour_ago, an_hour_ago))
    before = (data.read_bytes(), os.stat(data).st_mode, os.stat(data).st_mtime_ns)
    with lh.lock(data):
        # Held by this process: another lock of it names us, from the kernel.
        child = python(f"import pyleasehold as lh; lh.lock({str(data)!r})")
        _, err = child.communicate(timeout=60)
        assert child.returncode != 0 and f"locked by pid {os.getpid()}" in err, err
    with lh.lock(data, shared=True):
        pass
    with lh.lock(data, wait="1s"):
        pass
    assert (data.read_bytes(), os.stat(data).st_mode, os.stat(data).st_mtime_ns) == before


def test_the_default_store_is_the_clis(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), "LEASEHOLD_STORE": ""}
    child = python("import pyleasehold as lh; print(lh.Store().url)", env=env)
    assert read_line(child) == f"sqlite://{tmp_path}/leasehold/leasehold.db"
    env["LEASEHOLD_STORE"] = f"sqlite://{tmp_path}/other.db"
    child = python("import pyleasehold as lh; print(lh.Store().url)", env=env)
    assert read_line(child) == f"sqlite://{tmp_path}/other.db"


def test_passwords_are_never_shown(servers: Any) -> None:
    pg = servers.postgres()
    store = lh.Store(f"postgres://postgres:s3cret@127.0.0.1:{pg.port}/postgres?schema=pw")
    assert "s3cret" not in store.url and "s3cret" not in repr(store)


def test_the_package_is_typed_for_mypy_strict() -> None:
    examples = Path(__file__).resolve().parents[1] / "examples"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, str(examples)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_held_carries_its_facts_and_is_shown_as_leasehold_held(store_url: str) -> None:
    import pickle
    import traceback

    store = lh.Store(store_url)
    holder = store.lease("f", ttl="1m", owner="the-holder").acquire()
    before = datetime.datetime.now(datetime.timezone.utc)
    with pytest.raises(lh.Held) as raised:
        store.lease("f", ttl="1m").acquire()
    e = raised.value
    assert (e.name, e.waiters, e.token) == ("f", 0, holder.token)
    (h,) = e.holders
    assert (h.owner, h.token, h.mode, h.pid) == ("the-holder", holder.token, "exclusive", os.getpid())
    assert e.expires == h.expires and h.expires is not None
    assert before < h.expires <= before + datetime.timedelta(minutes=1, seconds=1)
    assert traceback.format_exception_only(type(e), e)[0].startswith("pyleasehold.Held: f is held: exclusive by the-holder")
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is lh.Held and (again.holders, again.name, str(again)) == (e.holders, e.name, str(e))
    holder.release()
    lock = lh.lock(Path(os.environ.get("TMPDIR", "/tmp")) / f"lh-held-{os.getpid()}")
    try:
        child = python(
            "import pyleasehold as lh, sys\n"
            "try:\n    lh.lock(sys.argv[1])\n"
            "except lh.Held as e:\n    print(e.name, [(h.pid, h.mode, h.token) for h in e.holders])\n",
            str(lock.path),
        )
        assert read_line(child) == f"{lock.path} [({os.getpid()}, 'exclusive', None)]"
    finally:
        lock.release()
        lock.path.unlink()


def test_renew_extend_expires_in_locked_and_owned(store_url: str) -> None:
    store = lh.Store(store_url)
    lease = store.lease("e", ttl="10s")
    other = store.lease("e", ttl="10s")
    assert lease.expires_in is None and not lease.locked() and not lease.owned()
    with lease:
        assert lease.owned() and lease.locked() and other.locked() and not other.owned()
        first = lease.expires_in
        assert first is not None and 0 < first <= 10
        time.sleep(0.3)
        lease.renew()
        renewed = lease.expires_in
        assert renewed is not None and renewed > first - 0.3 + 0.2, (first, renewed)
        lease.extend("1h")
        assert lease.ttl == 3600.0 and lease.expires_in is not None and lease.expires_in > 3500
        state = store.status("e")
        assert state is not None and state["grants"][0]["ttl"] == datetime.timedelta(hours=1)
        # A shorter TTL shortens the grant in the store at once.
        lease.extend(datetime.timedelta(seconds=5))
        state = store.status("e")
        assert state is not None and state["grants"][0]["expires_in"] <= datetime.timedelta(seconds=5)
        assert lease.expires_in is not None and lease.expires_in <= 5
        with pytest.raises(lh.InvalidInput, match="ttl"):
            lease.extend("2y")
        lease.check()
    assert not lease.locked() and lease.expires_in is None and lease.ttl == 10.0


def test_renew_of_a_lost_lease_is_the_loss(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    store = lh.Store(f"sqlite://{db}")
    seen: List[lh.LeaseLost] = []
    lease = store.lease("l", ttl="1s", on_lost=seen.append).acquire()
    blocker = block_sqlite(db, 3)  # no renewal gets through: the window closes
    try:
        deadline = time.monotonic() + 5
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        blocker.kill()
    assert lease.expires_in == 0.0
    with pytest.raises(lh.LeaseLost, match="was lost"):
        lease.renew()
    with pytest.raises(lh.LeaseLost, match="was lost"):
        lease.extend("1m")
    assert len(seen) == 1, "the loss is pushed once"
    with pytest.raises(lh.LeaseLost):
        lease.release()


def test_add_many_adds_in_one_go_and_purge_deletes_finished_tasks(queue_store_url: str) -> None:
    store = lh.Store(queue_store_url)
    q = store.queue("bulk")
    ids = q.add_many([{"n": i} for i in range(1000)])
    assert len(set(ids)) == 1000 and q.stats()["pending"] == 1000
    assert q.add_many(({"n": i} for i in range(3)), ids=["a", "b", "c"], priority=7) == ["a", "b", "c"]
    with pytest.raises(lh.InvalidInput, match="task b .*exists as another task; nothing was added"):
        q.add_many([{"n": 0}, {"n": "changed"}, {"n": 9}], ids=["x", "b", "y"])
    assert q.get("x") is None and q.get("y") is None, "a refused batch added nothing"
    with pytest.raises(lh.InvalidInput, match="2 payloads and 1 ids"):
        q.add_many([1, 2], ids=["only-one"])
    for one in ("hello", {"to": "a@b"}):
        with pytest.raises(TypeError, match="payloads must be a list .* for one task, use add"):
            q.add_many(one)
    with pytest.raises(TypeError, match="ids must be a list"):
        q.add_many(["a", "b"], ids="ab")
    assert q.stats()["pending"] == 1003, "nothing was added by a refused call"
    task = q.claim(ttl="1m")
    assert task.id == "a", "priority 7 first"
    task.done()
    assert [t["id"] for t in q.list(state="done")] == ["a"]
    assert q.purge("done", older_than="1h") == 0, "too recent"
    assert q.purge("done", older_than=0) == 1 and q.get("a") is None
    with pytest.raises(lh.InvalidInput, match='"done" or "dead"'):
        q.purge("pending", older_than=0)  # type: ignore[arg-type]
    with pytest.raises(lh.InvalidInput, match="state must be"):
        q.list(state="finished")  # type: ignore[arg-type]


def test_a_store_is_a_url_or_a_pathlib_path(tmp_path: Path) -> None:
    with lh.Store(tmp_path / "by-path.db") as store:
        assert store.url == f"sqlite://{tmp_path / 'by-path.db'}"
    for text in (str(tmp_path / "plain.db"), "localhost:5432", "agent:s3cret@db/leases"):
        with pytest.raises(lh.InvalidInput, match="has no scheme") as raised:
            lh.Store(text)
        assert "s3cret" not in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("plain")) == [], "a file was created"


@pytest.mark.usefixtures("ctrl_c_raises")
def test_interrupting_a_wait_gives_up_its_place_in_the_queue(store_url: str) -> None:
    """^C while waiting for a lease: the wait ends and leaves the store's
    queue at once — it used to wait on in the background, holding its
    place (and anyone behind it) until it was granted."""
    store = lh.Store(store_url)
    holder = store.lease("q", ttl="30s").acquire()
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        store.lease("q", ttl="30s", wait="1h").acquire()
    # Out within a poll (100 ms), far sooner than the registration would
    # lapse (10 s after a refresh, and a live wait refreshes it).
    deadline = time.monotonic() + 5
    while store.status("q")["waiters"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.status("q")["waiters"] == 0
    holder.release()
    store.lease("q").acquire().release()


def test_backup_copies_a_store_in_use_and_never_overwrites(tmp_path: Path) -> None:
    store = lh.Store(tmp_path / "s.db")
    with store.lease("job") as lease:
        token = lease.token
        taken = store.backup(tmp_path / "copy.db")
    assert taken["path"] == str(tmp_path / "copy.db")
    assert taken["bytes"] == (tmp_path / "copy.db").stat().st_size
    assert isinstance(taken["taken_at"], datetime.datetime) and taken["taken_at"].tzinfo
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    copy = lh.Store(tmp_path / "copy.db")
    status = copy.status("job")
    assert status is not None and status["last_token"] == token
    before = (tmp_path / "copy.db").read_bytes()
    with pytest.raises(lh.InvalidInput, match="exists .* never overwrites"):
        store.backup(tmp_path / "copy.db")
    assert (tmp_path / "copy.db").read_bytes() == before
    with pytest.raises(lh.InvalidInput, match="does not exist"):
        store.backup(tmp_path / "missing" / "copy.db")


@pytest.mark.parametrize("kind", ["postgres", "etcd", "firestore", "redis"])
def test_backup_is_refused_by_stores_with_their_own_tools(kind: str, servers: Servers, tmp_path: Path) -> None:
    # SQLite takes backups: the test above.
    if kind == "postgres":
        url, tool = servers.postgres().url(unique()), "pg_dump"
    elif kind == "etcd":
        url, tool = servers.etcd().url(unique()), "etcdctl snapshot save"
    elif kind == "redis":
        url, tool = servers.redis().url(unique()), "BGSAVE"
    else:
        emulator = servers.firestore()
        url, tool = emulator.url(emulator.unique_project()), "gcloud firestore export"
    with pytest.raises(lh.Unsupported, match=tool):
        lh.Store(url).backup(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
