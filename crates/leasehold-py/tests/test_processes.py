"""Races and crashes in real processes: multiprocessing contenders,
kill -9 of holders and workers, a holder paused past its TTL, and what a
child made by os.fork() may do with its parent's grants."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Tuple

import pytest

import pyleasehold as lh

from conftest import python, read_line

# multiprocessing's fork start method: the children are forks of this
# process (which opens no store before forking them).
FORK = multiprocessing.get_context("fork")


def contend(url: str, log: str, attempts: int) -> None:
    store = lh.Store(url)
    with open(log, "a", encoding="utf-8") as out:
        for _ in range(attempts):
            with store.lease("race", ttl="30s", wait="60s") as lease:
                start = time.monotonic()
                time.sleep(0.002)
                end = time.monotonic()
                out.write(f"{lease.token} {start} {end} {os.getpid()}\n")
                out.flush()


def test_eight_processes_never_overlap_and_tokens_grow(queue_store_url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    procs = [FORK.Process(target=contend, args=(queue_store_url, str(log), 25)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    rows: List[Tuple[int, float, float]] = []
    for line in log.read_text().splitlines():
        token, start, end, _ = line.split()
        rows.append((int(token), float(start), float(end)))
    assert len(rows) == 200
    rows.sort(key=lambda r: r[1])
    for (_, _, end), (_, start, _) in zip(rows, rows[1:]):
        assert end <= start, "two holders overlapped"
    tokens = [r[0] for r in rows]
    assert len(set(tokens)) == 200, "a token was issued twice"
    assert tokens == sorted(tokens), "tokens did not grow in the order of the grants"


def increment(path: str, times: int) -> None:
    for _ in range(times):
        lh.update_json(path, lambda s: {"n": s["n"] + 1}, default={"n": 0})


def test_four_processes_update_json_without_losing_one(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    procs = [FORK.Process(target=increment, args=(str(state), 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert json.loads(state.read_text()) == {"n": 100}


HOLDER = """
import sys, time, pyleasehold as lh
store = lh.Store(sys.argv[1])
lease = store.lease("job", ttl="60s").acquire()
print(lease.token, flush=True)
time.sleep(600)
"""


def test_kill_9_of_a_holder_lets_the_next_acquirer_in_at_once(queue_store_url: str) -> None:
    child = python(HOLDER, queue_store_url)
    token = int(read_line(child))
    store = lh.Store(queue_store_url)
    with pytest.raises(lh.Held):
        store.lease("job").acquire()
    child.send_signal(signal.SIGKILL)
    child.wait()
    started = time.monotonic()
    with store.lease("job", ttl="60s") as lease:
        assert lease.token > token
    assert time.monotonic() - started < 1, "the takeover waited for the TTL"


WORKER = """
import sys, time, pyleasehold as lh
store = lh.Store(sys.argv[1])
task = store.queue("jobs").claim(ttl=sys.argv[2])
print(task.id, task.token, flush=True)
sys.stdin.readline()
try:
    task.done({"by": "late"})
    print("done", flush=True)
except lh.LeaseLost as e:
    print("refused", e, flush=True)
"""


def test_kill_9_of_a_worker_mid_task_gives_the_task_back_once(queue_store_url: str) -> None:
    store = lh.Store(queue_store_url)
    q = store.queue("jobs")
    q.add({"n": 1}, id="t1")
    child = python(WORKER, queue_store_url, "1s")
    assert read_line(child).split()[0] == "t1"
    child.send_signal(signal.SIGKILL)
    child.wait()
    # The claim lapses a second after the last heartbeat; the wait is a
    # generous bound (a loaded disk's fsyncs stretched it past 10 s once).
    task = q.claim(ttl="1m", wait="30s")
    assert (task.id, task.attempt) == ("t1", 2)
    with task:
        pass
    stats = q.stats()
    assert (stats["done"], stats["pending"], stats["running"]) == (1, 0, 0)


def test_a_late_worker_cannot_report_a_task_claimed_again(queue_store_url: str) -> None:
    store = lh.Store(queue_store_url)
    q = store.queue("jobs")
    q.add({"n": 1}, id="t1")
    child = python(WORKER, queue_store_url, "1s", stdin=-1)
    read_line(child)
    child.send_signal(signal.SIGSTOP)  # paused past its claim's TTL
    task = q.claim(ttl="1m", wait="30s")
    task.done({"by": "second"})
    child.send_signal(signal.SIGCONT)
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()
    assert read_line(child).startswith("refused")
    got = q.get("t1")
    assert got is not None and got["state"] == "done" and q.stats()["done"] == 1
    assert got["result"] == {"by": "second"}


PAUSED = """
import os, sys, time, pyleasehold as lh
store = lh.Store(sys.argv[1])
lease = store.lease("publish", ttl="1s").acquire()
print(lease.token, flush=True)
give_up = time.monotonic() + 60
while not os.path.exists(sys.argv[3]):
    if time.monotonic() > give_up:
        sys.exit("the test never said go")
    time.sleep(0.01)
try:
    lh.write_atomic(sys.argv[2], "late", fence=lease)
    print("written", lease.lost, flush=True)
except lh.StaleToken as e:
    print("refused", lease.lost, flush=True)
"""


def test_a_paused_holders_late_fenced_write_is_refused(queue_store_url: str, tmp_path: Path) -> None:
    out, go = tmp_path / "out", tmp_path / "go"
    child = python(PAUSED, queue_store_url, str(out), str(go))
    token = int(read_line(child))
    child.send_signal(signal.SIGSTOP)
    store = lh.Store(queue_store_url)
    with store.lease("publish", ttl="30s", wait="10s") as lease:
        assert lease.token > token
        lh.write_atomic(out, "new", fence=lease)
    go.touch()
    child.send_signal(signal.SIGCONT)
    # Refused by the fence record alone: the write may run before the
    # resumed keeper has even noticed that its window closed.
    assert read_line(child).startswith("refused")
    assert out.read_text() == "new"


def in_fork(path: str, result: str, lease: lh.Lease, lock: lh.FileLock) -> None:
    said = {}
    said["lost"] = lease.lost
    for what, call in [("check", lease.check), ("release", lease.release), ("unlock", lock.release)]:
        try:
            call()
            said[what] = "no error"
        except lh.LeaseLost as e:
            said[what] = str(e)
    with open(result, "w", encoding="utf-8") as f:
        json.dump(said, f)


def fenced_in_fork(result: str, store: lh.Store, lease: lh.Lease, task: lh.Task, out: str) -> None:
    said = {}
    calls = {
        "write_atomic": lambda: lh.write_atomic(out, "from the child", fence=lease),
        "write_json": lambda: lh.write_json(out, {"by": "child"}, fence=lease),
        "update_json": lambda: lh.update_json(out, lambda s: "child", default=None, fence=lease),
        "store.fence": lambda: store.fence("parent", lease),
        "with lease": lambda: lease.__enter__(),
        "acquire": lease.acquire,
        "fence=task": lambda: lh.write_atomic(out, "from the child", fence=task),
    }
    for what, call in calls.items():
        try:
            call()
            said[what] = "no error"
        except Exception as e:
            said[what] = f"{type(e).__name__}: {e}"
    with open(result, "w", encoding="utf-8") as f:
        json.dump(said, f)


def hold_own_lease(url: str, ready: str, result: str) -> None:
    store = lh.Store(url)
    lease = store.lease("childs-own", ttl="3s").acquire()
    open(ready, "w").close()
    time.sleep(5)
    with open(result, "w", encoding="utf-8") as f:
        f.write(str(lease.held))
    lease.release()


def test_a_forked_child_keeps_its_own_lease_past_its_ttl(tmp_path: Path) -> None:
    # A child made by fork() takes its own lease: its keeper must start in
    # the child. The parent forks while its own keeper's start waits on the
    # parent's thread for deferred starts (TTL 60 s), a thread the child
    # does not have; a child that queued its keeper's start there never
    # renewed its lease, which lapsed after 3 s while it thought it held.
    url = f"sqlite://{tmp_path / 'l.db'}"
    store = lh.Store(url)
    parents = store.lease("parents", ttl="60s").acquire()
    ready, result = tmp_path / "ready", tmp_path / "result"
    child = FORK.Process(target=hold_own_lease, args=(url, str(ready), str(result)))
    child.start()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), "the child never took its lease"
    time.sleep(4)  # past the child's TTL
    with pytest.raises(lh.Held):
        store.lease("childs-own").acquire()
    child.join(30)
    assert child.exitcode == 0 and result.read_text() == "True"
    parents.release()


def test_a_forked_child_gets_the_fork_message_from_every_use_of_its_parents_grant(tmp_path: Path) -> None:
    # Issue 23: fence=lease and store.fence(name, lease) raised "TypeError:
    # fence must be a lease" in the child, and `with lease` said "already
    # held through this object".
    store = lh.Store(f"sqlite://{tmp_path / 'l.db'}")
    lease = store.lease("parent", ttl="30s").acquire()
    q = store.queue("q")
    q.add({"n": 1})
    task = q.claim(ttl="30s")
    out, result = tmp_path / "out", tmp_path / "said.json"
    child = FORK.Process(target=fenced_in_fork, args=(str(result), store, lease, task, str(out)))
    child.start()
    child.join(60)
    said = json.loads(result.read_text())
    for what, answer in said.items():
        assert answer.startswith("LeaseLost: ") and "child made by os.fork()" in answer, f"{what}: {answer}"
    assert not out.exists(), "the child wrote under its parent's grant"
    # The parent's own fenced writes still pass.
    lh.write_atomic(out, "from the parent", fence=lease)
    store.fence("parent", lease)
    task.done()
    lease.release()


def test_a_forked_child_neither_holds_renews_nor_releases_its_parents_grants(tmp_path: Path) -> None:
    store = lh.Store(f"sqlite://{tmp_path / 'l.db'}")
    lease = store.lease("parent", ttl="1s").acquire()
    lock = lh.lock(tmp_path / "lock")
    result = tmp_path / "said.json"
    child = FORK.Process(target=in_fork, args=(str(tmp_path), str(result), lease, lock))
    child.start()
    child.join(30)
    said = json.loads(result.read_text())
    assert said["lost"] is True
    for what in ("check", "release", "unlock"):
        assert "child made by os.fork()" in said[what], said
    # The parent's grant lives on, renewed by the parent, past its TTL.
    time.sleep(1.5)
    assert lease.held
    with pytest.raises(lh.Held):
        store.lease("parent").acquire()
    assert lock.locked
    with pytest.raises(lh.Held):
        lh.lock(tmp_path / "lock")
    lease.release()
    lock.release()


LOCK_THEN_FORK = """
import os, sys, time, pyleasehold as lh
held = lh.lock(sys.argv[1])
pid = os.fork()
if pid == 0:
    # os.fork() returns here after the at-fork hooks have run.
    open(sys.argv[1] + ".forked", "w").close()
    time.sleep(600)
    os._exit(0)
give_up = time.monotonic() + 60
while not os.path.exists(sys.argv[1] + ".forked"):
    if time.monotonic() > give_up:
        sys.exit("the forked child never said it runs")
    time.sleep(0.01)
print(pid, flush=True)
time.sleep(600)
"""


def test_a_forked_child_does_not_keep_its_dead_parents_lock(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    parent = python(LOCK_THEN_FORK, str(path))
    child_pid = int(read_line(parent))
    try:
        with pytest.raises(lh.Held):
            lh.lock(path)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        os.kill(child_pid, 0)  # the child lives on
        with lh.lock(path) as mine:
            assert mine.locked
    finally:
        os.kill(child_pid, signal.SIGKILL)


OWNED_HOLDER = """
import sys, pyleasehold as lh
lease = lh.Store(sys.argv[1]).lease("svc-job", ttl="30s", owner="svc").acquire()
print(lease.token, flush=True)
sys.stdin.readline()
lease.check()
print("still held", lease.token, flush=True)
"""


def test_one_owner_label_never_lets_a_second_process_hold_the_grant(store_url: str) -> None:
    """Two live processes with one `owner=` are two holders: the second is
    refused (`Held`) — it never shares, renews nor releases the first's
    grant — and after it gives up, the first still holds its grant."""
    first = python(OWNED_HOLDER, store_url, stdin=subprocess.PIPE)
    token = int(read_line(first))
    store = lh.Store(store_url)
    with pytest.raises(lh.Held) as held:
        store.lease("svc-job", ttl="30s", owner="svc").acquire()
    assert [h.token for h in held.value.holders] == [token]
    assert first.stdin is not None
    first.stdin.write("\n")
    first.stdin.flush()
    assert read_line(first) == f"still held {token}"
    assert first.wait(timeout=60) == 0
    with store.lease("svc-job", ttl="30s", owner="svc") as lease:
        assert lease.token > token


def test_a_released_file_lock_entered_again_is_locked_again(tmp_path: Path) -> None:
    """`with lk:` on a released `lh.FileLock` locks it again (as filelock
    and `lh.Lease` do), or raises `Held` while another process holds it:
    its block never runs unlocked."""
    path = tmp_path / "data.lock"
    probe = "import pyleasehold as lh, sys\ntry:\n    lh.lock(sys.argv[1]).release()\n    print('free')\nexcept lh.Held:\n    print('held')\n"

    def seen_by_another_process() -> str:
        return read_line(python(probe, str(path)))

    lk = lh.lock(path)
    lk.release()
    assert not lk.locked
    with lk:
        assert lk.locked and seen_by_another_process() == "held"
    assert not lk.locked and seen_by_another_process() == "free"
    with lk:
        assert seen_by_another_process() == "held"
    other = python("import pyleasehold as lh, sys\nlk = lh.lock(sys.argv[1])\nprint('locked', flush=True)\nsys.stdin.readline()\n", str(path), stdin=subprocess.PIPE)
    assert read_line(other) == "locked"
    ran = False
    with pytest.raises(lh.Held):
        with lk:
            ran = True
    assert not ran, "the block ran while another process held the lock"
    assert other.stdin is not None
    other.stdin.write("\n")
    other.stdin.flush()
    assert other.wait(timeout=60) == 0
