"""State-file writes that wait (issue 41, defect 15): a write that would
wait for a lock its own thread holds is refused at once, and a ^C while a
write waits for another process's lock ends it without writing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyleasehold as lh

from conftest import python, read_line

# Each case runs in a child: on a regression it waits for itself for ever,
# and the timeout ends it.
REENTRY = """
import sys, pyleasehold as lh
path, how = sys.argv[1], sys.argv[2]
try:
    if how == "update":
        lh.update_json(path, lambda old: lh.write_json(path, {"inner": 1}) or {"outer": 1}, default={})
    elif how == "update-update":
        lh.update_json(path, lambda old: lh.update_json(path, lambda o: o, default={}), default={})
    else:
        with lh.lock(path + ".lock"):
            lh.write_json(path, {"inner": 1})
except lh.InvalidInput as e:
    print("refused:", e)
"""


def test_a_write_under_its_own_threads_lock_is_refused_not_waited_for(tmp_path: Path) -> None:
    for how in ["update", "update-update", "lock"]:
        state = tmp_path / f"{how}.json"
        lh.write_json(state, {"before": True})
        done = subprocess.run(
            [sys.executable, "-c", REENTRY, str(state), how], capture_output=True, text=True, timeout=20
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("refused:"), (how, done.stdout, done.stderr)
        assert f"{state}.lock, which this thread holds" in done.stdout, done.stdout
        # Nothing was written by the refused call (nor by the update around it).
        assert json.loads(state.read_text()) == {"before": True}


def test_a_write_waiting_for_another_threads_lock_still_waits(tmp_path: Path) -> None:
    import threading

    state = tmp_path / "s.json"
    held = lh.lock(f"{state}.lock")
    wrote = threading.Event()

    def writer() -> None:
        lh.write_json(state, {"v": 1})
        wrote.set()

    threading.Thread(target=writer, daemon=True).start()
    assert not wrote.wait(0.3)
    held.release()
    assert wrote.wait(30)
    assert json.loads(state.read_text()) == {"v": 1}


INTERRUPTED = """
import sys, pyleasehold as lh
path = sys.argv[1]
print("waiting", flush=True)
try:
    lh.write_json(path, {"written": True})
    print("wrote")
except KeyboardInterrupt as e:
    print("interrupted", getattr(e, "__notes__", []), flush=True)
sys.stdin.readline()
# The lock is free now: once this process holds it, its own cancelled
# write (which waited for it) has had its turn.
with lh.lock(path + ".lock", wait="30s"):
    pass
print("done", flush=True)
"""


def test_ctrl_c_while_a_write_waits_for_another_process_writes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    lh.write_json(state, {"before": True})
    held = lh.lock(f"{state}.lock")
    child = python(INTERRUPTED, str(state), stdin=subprocess.PIPE)
    assert read_line(child) == "waiting"
    time.sleep(0.5)  # into the wait for the lock
    child.send_signal(signal.SIGINT)
    assert read_line(child) == "interrupted []"
    held.release()
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()
    assert read_line(child) == "done"
    assert child.wait(30) == 0
    assert json.loads(state.read_text()) == {"before": True}
