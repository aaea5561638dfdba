"""No call ever freezes the interpreter.

What must never happen: a Python call that waits on a Rust lock while
holding the GIL — other threads stop, ^C is ignored, only kill -9 ends it
(issue 23: a second `release()` of a lease, a second report of a task). Each
sequence runs in a child interpreter that the test kills after a generous
timeout, so a hang fails the test instead of hanging the suite; the child
only prints what each call answered, and the judging is done here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import pyleasehold as lh

from conftest import block_sqlite, python, read_line

#: Long enough for any answer on a loaded machine; a hang is far longer.
ANSWER_WITHIN = 30.0

SEQUENCES = r'''
import json, sys, pyleasehold as lh
store = lh.Store(sys.argv[1])
q = store.queue("q")

def claimed():
    q.add({"n": 1})
    return q.claim(ttl="1m")

def lease_release_twice():
    l = store.lease("x", ttl="10s").acquire(); l.release(); l.release()

def lease_release_after_with():
    with store.lease("x", ttl="10s") as l:
        pass
    l.release()

def lease_release_never_acquired():
    store.lease("x", ttl="10s").release()

def lease_release_inside_with():
    with store.lease("x", ttl="10s") as l:
        l.release()        # leaving the block afterwards is fine

def lease_acquire_twice():
    l = store.lease("x", ttl="10s").acquire()
    try:
        l.acquire()
    finally:
        l.release()

def lease_renew_after_release():
    l = store.lease("x", ttl="10s").acquire(); l.release(); l.renew()

def lease_extend_never_acquired():
    store.lease("x", ttl="10s").extend("20s")

def lease_check_after_release():
    l = store.lease("x", ttl="10s").acquire(); l.release(); l.check()

def task_done_twice():
    t = claimed(); t.done(); t.done()

def task_done_then_fail():
    t = claimed(); t.done(); t.fail("x")

def task_release_then_done():
    t = claimed(); t.release(); t.done()

def task_with_then_release():
    t = claimed()
    with t:
        pass
    t.release()

def task_fail_then_release():
    t = claimed(); t.fail("boom"); t.release()

def lock_release_twice():
    f = lh.lock(sys.argv[2]); f.release(); f.release()

def lock_release_inside_with():
    with lh.lock(sys.argv[2]) as f:
        f.release()

said = {}
for name, call in list(globals().items()):
    if name.startswith(("lease_", "task_", "lock_")) and callable(call):
        try:
            call()
            said[name] = ["ok", ""]
        except Exception as e:
            said[name] = [type(e).__name__, str(e)]
        print(name, flush=True)     # progress: which sequence answered
print(json.dumps(said), flush=True)
'''

#: What each second report must answer: the exception class and words of
#: its message (what was already done); "ok" where nothing is wrong.
EXPECTED: Dict[str, Tuple[str, List[str]]] = {
    "lease_release_twice": ("InvalidInput", ["lease x (token", "was already released"]),
    "lease_release_after_with": ("InvalidInput", ["was already released"]),
    "lease_release_never_acquired": ("InvalidInput", ["was never acquired"]),
    "lease_release_inside_with": ("ok", []),
    "lease_acquire_twice": ("InvalidInput", ["is already held through this object"]),
    "lease_renew_after_release": ("InvalidInput", ["was already released", "nothing to renew"]),
    "lease_extend_never_acquired": ("InvalidInput", ["was never acquired"]),
    "lease_check_after_release": ("InvalidInput", ["was already released", "nothing to check"]),
    "task_done_twice": ("InvalidInput", ["was already reported (done)", "this done() was not recorded"]),
    "task_done_then_fail": ("InvalidInput", ["was already reported (done)", "this fail() was not recorded"]),
    "task_release_then_done": ("InvalidInput", ["was already reported (released)", "this done() was not recorded"]),
    "task_with_then_release": ("InvalidInput", ["was already reported (done)", "this release() was not recorded"]),
    "task_fail_then_release": ("InvalidInput", ["was already reported (retrying)"]),
    "lock_release_twice": ("InvalidInput", ["released already"]),
    "lock_release_inside_with": ("ok", []),
}


def test_every_second_report_answers_at_once(tmp_path: Path) -> None:
    child = python(SEQUENCES, f"sqlite://{tmp_path / 'l.db'}", str(tmp_path / "lock"))
    try:
        out, err = child.communicate(timeout=ANSWER_WITHIN)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        answered = out.splitlines()
        pytest.fail(f"the interpreter froze after {answered[-1] if answered else 'nothing'}; stderr: {err}")
    assert child.returncode == 0, err
    said = json.loads(out.splitlines()[-1])
    assert set(said) == set(EXPECTED), "every sequence ran"
    for sequence, (cls, words) in EXPECTED.items():
        got_cls, message = said[sequence]
        assert got_cls == cls, f"{sequence}: {got_cls}: {message}"
        for w in words:
            assert w in message, f"{sequence}: {message!r} does not say {w!r}"


def test_a_second_report_records_nothing(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    q = store.queue("q")
    q.add({"n": 1}, id="a")
    t = q.claim(ttl="1m")
    t.done({"first": True})
    for second in (lambda: t.fail("late"), lambda: t.done({"second": True}), t.release):
        with pytest.raises(lh.InvalidInput, match="already reported"):
            second()
    got = q.get("a")
    assert got is not None and (got["state"], got["result"], got["last_error"]) == ("done", {"first": True}, None)
    q.add({"n": 2}, id="b")
    t = q.claim(ttl="1m")
    t.release()
    with pytest.raises(lh.InvalidInput, match=r"already reported \(released\)"):
        t.done()
    got = q.get("b")
    assert got is not None and got["state"] == "pending" and got["attempts"] == 0


RELEASE_WHILE_BUSY = r'''
import json, sys, threading, time, pyleasehold as lh
store = lh.Store(sys.argv[1])
lease = store.lease("x", ttl="30s").acquire()
ticks = []
second = {}
def beside():
    # Another Python thread: it must keep running, and a second release
    # must answer at once, while the first waits for the store.
    if not releasing.wait(60):
        return
    time.sleep(0.3)
    started = time.monotonic()
    try:
        lease.release()
        second["said"] = "ok"
    except lh.Error as e:
        second["said"] = f"{type(e).__name__}: {e}"
    second["took"] = time.monotonic() - started
    second["held"] = lease.held
    second["repr"] = repr(lease)
    give_up = time.monotonic() + 60
    while not done.is_set() and time.monotonic() < give_up:
        ticks.append(time.monotonic())
        time.sleep(0.005)
releasing, done = threading.Event(), threading.Event()
threading.Thread(target=beside, daemon=True).start()
print("held", flush=True)
sys.stdin.readline()                 # the store is locked now
releasing.set()
started = time.monotonic()
try:
    lease.release()
    first = "ok"
except lh.Error as e:
    first = type(e).__name__
ended = time.monotonic()
done.set()
print(json.dumps({"first": first, "blocked": ended - started, "second": second,
                  "ticks_while_blocked": sum(1 for t in ticks if started < t < ended)}), flush=True)
'''


def test_other_threads_run_and_a_second_release_answers_while_a_release_waits_for_the_store(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    child = python(RELEASE_WHILE_BUSY, f"sqlite://{db}", stdin=subprocess.PIPE)
    assert read_line(child) == "held"
    blocker = block_sqlite(db, 3)  # the release waits for SQLite's write lock
    try:
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.flush()
        said = json.loads(read_line(child, timeout=ANSWER_WITHIN))
    finally:
        blocker.kill()
        child.kill()
    assert said["blocked"] > 1.0, f"the first release did not wait for the store: {said}"
    second = said["second"]
    assert second["said"].startswith("InvalidInput") and "being released by another thread" in second["said"], second
    assert second["took"] < 1.0, f"the second release waited: {second}"
    assert second["held"] is False and "being released" in second["repr"], second
    # The other thread ran throughout (a tick every 5 ms; far fewer would do).
    assert said["ticks_while_blocked"] > 20, said


WAIT_THEN_CTRL_C = r'''
import signal, sys, time, pyleasehold as lh
# ^C raises, as in a program started at a terminal, even when the suite
# was started with SIGINT ignored (conftest's ctrl_c_raises says why).
signal.signal(signal.SIGINT, signal.default_int_handler)
store = lh.Store(sys.argv[1])
what = sys.argv[2]
print("waiting", flush=True)
if what == "lease":
    store.lease("x", ttl="30s", wait=True).acquire()
elif what == "async":
    import asyncio
    async def main():
        async with store.lease("x", ttl="30s", wait=True):
            pass
    asyncio.run(main())
elif what == "claim":
    store.queue("empty").claim(ttl="30s", wait=True)
elif what == "lock":
    lh.lock(sys.argv[3], wait=True)
elif what == "run":
    store.run("x", ["sleep", "600"], ttl="30s", wait=True)
print("returned", flush=True)
'''


@pytest.mark.parametrize("what", ["lease", "async", "claim", "lock", "run"])
def test_ctrl_c_ends_a_blocked_wait(tmp_path: Path, what: str) -> None:
    url = f"sqlite://{tmp_path / 'l.db'}"
    store = lh.Store(url)
    holder = store.lease("x", ttl="30s").acquire()
    lock = lh.lock(tmp_path / "lock")
    child = python(WAIT_THEN_CTRL_C, url, what, str(tmp_path / "lock"))
    try:
        assert read_line(child) == "waiting"
        time.sleep(0.5)  # well into the wait
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=ANSWER_WITHIN)
        took = time.monotonic() - sent
    finally:
        child.kill()
        holder.release()
        lock.release()
    assert "KeyboardInterrupt" in err, err
    assert took < 10, f"^C took {took:.1f}s to end the wait"


def test_a_lease_the_interpreter_drops_while_held_is_released(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    store.lease("gone", ttl="1h").acquire()  # dropped at once
    with store.lease("gone", ttl="1h", wait="10s") as lease:
        assert lease.held

