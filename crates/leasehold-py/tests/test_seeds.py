"""The seeds' own programs, ported (examples/), driven as their authors
drove them: competing runs, a stale publisher, a second instance, a worker
killed mid-task."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

import pyleasehold as lh

from conftest import EXAMPLES, python, read_line

sys.path.insert(0, str(EXAMPLES))

import guarded_publish  # noqa: E402
import json_queue_worker  # noqa: E402


def test_guarded_publish_runs_only_under_the_lease(queue_store_url: str, tmp_path: Path) -> None:
    store = lh.Store(queue_store_url)
    gate = str(tmp_path / "publish_gate.json")
    pushed: List[int] = []
    token = guarded_publish.run(store, gate, pushed.append)
    assert token is not None and pushed == [token]
    # Another run holds the repository: this one skips.
    with store.lease("gemilab-repo"):
        assert guarded_publish.run(store, gate, pushed.append) is None
    assert len(pushed) == 1


def test_guarded_publish_refuses_a_run_that_woke_up_late(queue_store_url: str, tmp_path: Path) -> None:
    gate, go = tmp_path / "publish_gate.json", tmp_path / "go"
    late = python(
        """
import os, sys, time
sys.path.insert(0, sys.argv[3])
import pyleasehold as lh, guarded_publish as g
store = lh.Store(sys.argv[1])
with store.lease("gemilab-repo", ttl="1s") as lease:
    print(lease.token, flush=True)
    give_up = time.monotonic() + 60
    while not os.path.exists(sys.argv[4]):
        if time.monotonic() > give_up:
            sys.exit("the test never said go")
        time.sleep(0.01)
    try:
        g.guarded_publish(lease, sys.argv[2], lambda: print("pushed", flush=True))
    except (lh.LeaseLost, lh.StaleToken) as e:
        print("refused", type(e).__name__, flush=True)
""",
        queue_store_url,
        str(gate),
        str(EXAMPLES),
        str(go),
    )
    stale = int(read_line(late))
    late.send_signal(signal.SIGSTOP)  # paused past its lease
    store = lh.Store(queue_store_url)
    pushed: List[int] = []
    # The paused run's 1 s lease runs out; a generous bound for a loaded machine.
    give_up = time.monotonic() + 30
    while not pushed and time.monotonic() < give_up:
        if guarded_publish.run(store, str(gate), pushed.append) is None:
            time.sleep(0.1)
    assert pushed, "no run published within 30 s of the holder's pause"
    assert pushed[0] > stale
    go.touch()
    late.send_signal(signal.SIGCONT)
    assert read_line(late).startswith("refused")
    assert json.loads(gate.read_text())["fencing"] == pushed[0]


def test_guarded_publish_from_the_command_line(queue_store_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "guarded_publish.py"), queue_store_url, str(tmp_path / "gate.json")],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "pushed with fencing token" in done.stdout


def test_json_queue_worker_is_single_instance_and_never_does_a_task_twice(
    queue_store_url: str, tmp_path: Path
) -> None:
    script = str(EXAMPLES / "json_queue_worker.py")
    subprocess.run(
        [sys.executable, script, queue_store_url, str(tmp_path), "add", "t1", "t2", "t3"], check=True, timeout=120
    )
    # Worker A claims t1 and is killed with -9 in the middle of it.
    a = python(
        """
import sys, time
sys.path.insert(0, sys.argv[3])
import pyleasehold as lh, json_queue_worker as w
def slow(task):
    print("working", task.id, flush=True)
    time.sleep(600)
w.work(lh.Store(sys.argv[1]), sys.argv[2], slow)
""",
        queue_store_url,
        str(tmp_path),
        str(EXAMPLES),
    )
    assert read_line(a) == "working t1"
    # A second instance is refused while A runs.
    second = subprocess.run(
        [sys.executable, script, queue_store_url, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert "already running" in second.stdout
    a.send_signal(signal.SIGKILL)
    a.wait()
    # The next instance gets the lock at once and t1 back after its claim's TTL.
    started = time.monotonic()
    store = lh.Store(queue_store_url)
    done: List[str] = []
    while len(done) < 3 and time.monotonic() - started < 20:
        done += json_queue_worker.work(store, str(tmp_path))
    assert sorted(done) == ["t1", "t2", "t3"]
    state = json.loads((tmp_path / "state.json").read_text())
    assert sorted(state["done"]) == ["t1", "t2", "t3"]
    assert state["done"]["t1"]["attempt"] == 2, "t1 was claimed again after the kill"
    assert store.queue("agent-tasks").stats()["done"] == 3


def test_the_tour_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "tour.py"), f"sqlite://{tmp_path / 'tour.db'}", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "publishing with token" in done.stdout and "sending to a@b" in done.stdout
