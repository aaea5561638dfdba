"""What ``subprocess.run`` users reach for, on ``store.run`` (issue 41,
defect 16): ``env``, ``cwd``, ``input``, ``capture_output``/``text`` and
``timeout`` with real processes — the timeout stopping a command's whole
tree (a child that left its process group and ignores SIGTERM included)
before the lease is free — and fenced writes that record and check the
lease their token is of, as ``leasehold write --fence-lease`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest

import pyleasehold as lh

from conftest import leasehold_cli
from test_package import mypy

PY = sys.executable


def test_a_timing_that_cannot_stop_the_command_names_the_keywords(sqlite_url: str) -> None:
    # The library's one wording of the refusal (the CLI's, with --ttl),
    # in Python's spelling, with only the remedies that apply.
    store = lh.Store(sqlite_url)
    with pytest.raises(lh.InvalidInput) as refused:
        store.run("timing", [PY, "-c", "pass"], ttl=10, grace=10)
    assert str(refused.value) == (
        "grace=10s + slack 500ms leave no time to renew within ttl=10s: the command could not be "
        "stopped before the lease expires in the store. Raise ttl=, or lower grace="
    )
    with pytest.raises(
        lh.InvalidInput,
        match=r"^heartbeat=9s 600ms \+ grace=0ms \(default\) \+ slack 500ms must be shorter than ttl=10s: .*\. "
        r"Raise ttl=, or lower heartbeat=$",
    ):
        store.run("timing", [PY, "-c", "pass"], ttl=10, heartbeat=9.6)


def test_env_adds_to_the_environment_and_cannot_set_the_grant(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    show = "import os, json; print(json.dumps({k: os.environ.get(k) for k in ('FOO', 'PATH', 'LEASEHOLD_NAME')}))"
    done = store.run("env", [PY, "-c", show], env={"FOO": "bar"}, capture_output=True)
    seen = json.loads(done.stdout)
    # Added to this process's environment (PATH kept), the grant's own
    # variables still set.
    assert seen == {"FOO": "bar", "PATH": os.environ["PATH"], "LEASEHOLD_NAME": "env"}
    with pytest.raises(lh.InvalidInput, match="env sets LEASEHOLD_TOKEN, which run sets"):
        store.run("env", [PY, "-c", "pass"], env={"LEASEHOLD_TOKEN": "99"})
    with pytest.raises(TypeError, match="env must map str to str"):
        store.run("env", [PY, "-c", "pass"], env={"N": 1})  # type: ignore[dict-item]
    with pytest.raises(lh.InvalidInput, match="cannot be an environment variable"):
        store.run("env", [PY, "-c", "pass"], env={"A=B": "c"})
    # Refused before anything ran: one grant, the first run's.
    status = store.status("env")
    assert status is not None and status["last_token"] == 1


def test_cwd_is_where_the_command_runs_and_finds_a_relative_program(sqlite_url: str, tmp_path: Path) -> None:
    store = lh.Store(sqlite_url)
    work = tmp_path / "work"
    work.mkdir()
    script = work / "where.sh"
    script.write_text("#!/bin/sh\npwd\n")
    script.chmod(0o755)
    done = store.run("cwd", ["./where.sh"], cwd=work, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"{work}\n")
    assert os.getcwd() != str(work)
    with pytest.raises(FileNotFoundError, match="cwd .*missing.*nothing was run"):
        store.run("cwd", ["./where.sh"], cwd=tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        store.run("cwd", ["./where.sh"], cwd=script)
    status = store.status("cwd")
    assert status is not None and status["last_token"] == 1


def test_input_is_fed_to_stdin_and_closed(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    done = store.run("in", ["cat"], input=b"hello\x00\xff\n", capture_output=True)
    assert done.stdout == b"hello\x00\xff\n"
    # More than a pipe holds, as str (UTF-8).
    big = "é" * 200_000
    done = store.run("in", ["wc", "-c"], input=big, capture_output=True, text=True)
    assert int(done.stdout) == len(big.encode())
    with pytest.raises(TypeError, match="input must be bytes or str"):
        store.run("in", ["cat"], input=42)  # type: ignore[arg-type]


def test_capture_output_returns_a_completed_process(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    argv = [PY, "-c", "import sys; sys.stdout.write('out' * 100000); sys.stderr.write('err\\n'); sys.exit(3)"]
    done = store.run("cap", argv, capture_output=True)
    assert isinstance(done, subprocess.CompletedProcess)
    assert (done.args, done.returncode) == (argv, 3)
    assert done.stdout == b"out" * 100000 and done.stderr == b"err\n"
    text = store.run("cap", [PY, "-c", "print('\u00e9t\u00e9')"], capture_output=True, text=True)
    assert (text.stdout, text.stderr) == ("\u00e9t\u00e9\n", "")
    # Without it, the exit code as before.
    assert store.run("cap", [PY, "-c", "raise SystemExit(4)"]) == 4


def _pids(path: Path) -> List[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# The command starts a child that leaves its process group (setsid) and
# ignores SIGTERM: only the guard's sweep of the tree, and SIGKILL after the
# grace period, end it.
TREE = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(600)
    os._exit(0)
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
print("started", flush=True)
time.sleep(600)
"""


def test_a_timeout_stops_the_whole_tree_before_the_lease_is_free(sqlite_url: str, tmp_path: Path) -> None:
    store, watcher = lh.Store(sqlite_url), lh.Store(sqlite_url)
    pids = tmp_path / "pids"
    seen: List[str] = []
    running = threading.Event()
    done = threading.Event()

    def watch() -> None:
        # Never: the lease free (no live grant) while a process of the
        # command lives.
        while not done.is_set():
            alive = [pid for pid in _pids(pids) if _alive(pid)]
            status = watcher.status("tree")
            held = status is not None and any(g["alive"] for g in status["grants"])
            if len(alive) == 2 and held:
                running.set()
            if alive and not held:
                seen.append(f"lease free while {alive} lived")
            time.sleep(0.01)

    thread = threading.Thread(target=watch)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(lh.RunTimeout) as raised:
            store.run("tree", [PY, "-c", TREE, str(pids)], ttl="30s", grace="1s", timeout=1.5, capture_output=True)
    finally:
        done.set()
        thread.join()
    took = time.monotonic() - started
    # At the raise: every process gone, the lease released.
    assert len(_pids(pids)) == 2
    assert [pid for pid in _pids(pids) if _alive(pid)] == []
    status = watcher.status("tree")
    assert status is not None and not any(g["alive"] for g in status["grants"])
    assert running.is_set() and seen == []
    # SIGTERM at 1.5 s, ignored by the child: SIGKILL a grace later.
    assert 2.4 <= took < 20, took
    e = raised.value
    assert isinstance(e, subprocess.TimeoutExpired) and isinstance(e, lh.Error)
    assert (e.cmd, e.timeout, e.output, e.stderr) == ([PY, "-c", TREE, str(pids)], 1.5, b"started\n", b"")
    assert "ran past its timeout of 1s 500ms" in str(e) and "lease tree released" in str(e), str(e)
    # The lease passes on at once.
    assert store.run("tree", ["true"], timeout=30) == 0


def test_a_command_done_before_its_timeout_returns_as_usual(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    started = time.monotonic()
    assert store.run("quick", ["sh", "-c", "exit 5"], timeout="60s") == 5
    assert time.monotonic() - started < 30


def test_a_sigterm_at_the_timeout_is_the_commands_to_handle(sqlite_url: str, tmp_path: Path) -> None:
    # The supervisor's stop sequence, as for a lost lease: SIGTERM first.
    store = lh.Store(sqlite_url)
    note = tmp_path / "note"
    handler = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(note)!r}, 'w').write('terminated'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(lh.RunTimeout):
        store.run("term", [PY, "-c", handler], grace="10s", timeout=1)
    assert note.read_text() == "terminated"


def test_run_options_type_check_under_mypy_strict(tmp_path: Path) -> None:
    checked = mypy(
        "import subprocess\n"
        "from typing import List, Tuple\n"
        "import pyleasehold as lh\n"
        "def go(store: lh.Store, argv: List[str], both: Tuple[str, ...]) -> int:\n"
        "    code: int = store.run('x', argv, env={'A': 'b'}, cwd='/tmp', input=b'x', timeout='5s')\n"
        "    raw: subprocess.CompletedProcess[bytes] = store.run('x', both, capture_output=True)\n"
        "    out: bytes = raw.stdout\n"
        "    text: str = store.run('x', argv, capture_output=True, text=True).stderr\n"
        "    try:\n"
        "        store.run('x', argv, timeout=1)\n"
        "    except subprocess.TimeoutExpired as e:\n"
        "        assert isinstance(e, lh.RunTimeout)\n"
        "    return code + raw.returncode + len(out) + len(text)\n",
        tmp_path,
    )
    assert checked.returncode == 0, checked.stdout


# Fenced writes name their lease, as `leasehold write --fence-lease` does.


def test_a_fence_of_another_lease_is_refused_naming_both(sqlite_url: str, tmp_path: Path) -> None:
    store = lh.Store(sqlite_url)
    path = tmp_path / "state.json"
    for _ in range(3):
        with store.lease("other", ttl="30s"):
            pass
    with store.lease("mine", ttl="30s") as mine:
        lh.write_json(path, {"by": "mine"}, fence=mine)
        record = (tmp_path / "state.json.fence").read_text()
        assert record == f"{mine.token} {mine.grant} lease mine\n"
        with store.lease("other", ttl="30s") as other:
            assert other.token > mine.token
            # Another lease's higher token must not lock the holder out.
            for write in (
                lambda: lh.write_json(path, {"by": "other"}, fence=other),
                lambda: lh.write_atomic(path, b"other", fence=other),
                lambda: lh.update_json(path, lambda old: {"by": "other"}, fence=other),
                lambda: lh.write_json(path, {"by": "other"}, fence=other.token, fence_lease="other"),
            ):
                with pytest.raises(lh.StaleToken) as refused:
                    write()
                message = str(refused.value)
                assert "is fenced by lease mine" in message and "not by lease other" in message, message
                assert "fence_new_lease=True" in message and "--fence-new-lease" not in message, message
            assert json.loads(path.read_text()) == {"by": "mine"}
            assert (tmp_path / "state.json.fence").read_text() == record
            # The holder goes on writing.
            lh.write_json(path, {"by": "mine", "n": 2}, fence=mine)
            # Unless told the file is the other lease's now.
            lh.update_json(path, lambda old: {"by": "other"}, fence=other, fence_new_lease=True)
            assert (tmp_path / "state.json.fence").read_text() == f"{other.token} {other.grant} lease other\n"
            with pytest.raises(lh.StaleToken, match="fenced by lease other"):
                lh.write_json(path, {"by": "mine"}, fence=mine)


def test_an_int_token_names_its_lease_as_the_cli_does(sqlite_url: str, tmp_path: Path) -> None:
    path = tmp_path / "f"
    lh.write_atomic(path, b"1", fence=7, fence_lease="nightly")
    assert (tmp_path / "f.fence").read_text() == "7 lease nightly\n"
    with pytest.raises(lh.StaleToken, match="fenced by lease nightly"):
        lh.write_atomic(path, b"2", fence=9, fence_lease="weekly")
    # A token of no named lease is judged by its token, as before.
    lh.write_atomic(path, b"3", fence=8)
    with pytest.raises(lh.InvalidInput, match="fence_lease= and fence_new_lease= name the lease of fence="):
        lh.write_atomic(path, b"4", fence_lease="nightly")
    with pytest.raises(lh.InvalidInput, match="fence_new_lease=True needs the lease's name"):
        lh.write_atomic(path, b"4", fence=10, fence_new_lease=True)
    store = lh.Store(sqlite_url)
    with store.lease("nightly", ttl="30s") as lease:
        with pytest.raises(lh.InvalidInput, match="grant of lease nightly, but fence_lease= names weekly"):
            lh.write_atomic(path, b"4", fence=lease, fence_lease="weekly")


def test_python_and_the_cli_keep_one_record_and_one_refusal(sqlite_url: str, tmp_path: Path) -> None:
    cli, path = leasehold_cli(), tmp_path / "out"

    def cli_write(token: int, lease: str) -> "subprocess.CompletedProcess[bytes]":
        argv = [cli, "write", str(path), "--fence-token", str(token), "--fence-lease", lease]
        return subprocess.run(argv, input=b"cli", capture_output=True, check=False, timeout=60)

    assert cli_write(5, "other").returncode == 0
    store = lh.Store(sqlite_url)
    with store.lease("mine", ttl="30s") as mine:
        # The CLI's record of lease other refuses Python's write of lease mine
        # (a lower token: the lease is what is named first).
        with pytest.raises(lh.StaleToken, match="is fenced by lease other .token 5 written., not by lease mine"):
            lh.write_atomic(path, b"py", fence=mine)
        lh.write_atomic(path, b"py", fence=mine, fence_new_lease=True)
        assert (tmp_path / "out.fence").read_text() == f"{mine.token} {mine.grant} lease mine\n"
        # And Python's record refuses the CLI's token of lease other, in the
        # same words, the CLI's option named.
        refused = cli_write(9, "other")
        assert refused.returncode == 13, refused
        assert b"is fenced by lease mine" in refused.stderr and b"--fence-new-lease" in refused.stderr, refused.stderr
    assert path.read_bytes() == b"py"
