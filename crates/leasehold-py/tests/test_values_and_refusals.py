"""Values and refusals a Python user meets (issue 41, defect 16): queue
JSON keeps integers exact or refuses them, a timed-out wait is a
``TimeoutError``, non-JSON values are a ``TypeError`` as for
``json.dumps``, a held lease dropped unreleased warns, a reported task's
``with`` block does not run, a SQLite URL takes no query string, and
``store.run`` takes any sequence of str for mypy --strict."""

from __future__ import annotations

import gc
import json
import os
import warnings
from pathlib import Path

import pytest

import pyleasehold as lh

from test_package import mypy


def test_queue_integers_stay_exact_or_are_refused(sqlite_url: str) -> None:
    queue = lh.Store(sqlite_url).queue("q")
    for exact in [2**63 - 1, -(2**63), 2**64 - 1]:
        queue.add({"n": exact})
        task = queue.claim(ttl="30s")
        assert task.payload == {"n": exact} and isinstance(task.payload["n"], int)
        task.done({"r": [exact]})
        info = queue.get(task.id)
        assert info is not None and info["result"] == {"r": [exact]}
    for wide in [2**64, -(2**63) - 1, 10**30]:
        with pytest.raises(lh.InvalidInput, match=f"the integer {wide} does not fit in 64 bits"):
            queue.add({"deep": [1, {"n": wide}]})
        with pytest.raises(lh.InvalidInput, match="does not fit in 64 bits"):
            queue.add_many([1, wide])
    queue.add("for the result")
    task = queue.claim(ttl="30s")
    with pytest.raises(lh.InvalidInput, match="does not fit in 64 bits"):
        task.done(2**64)
    task.done(1)
    assert queue.stats()["pending"] == 0


def test_a_timed_out_wait_is_a_timeout_error_and_still_held(sqlite_url: str, tmp_path: Path) -> None:
    store = lh.Store(sqlite_url)
    with store.lease("x", ttl="30s"):
        with pytest.raises(TimeoutError) as waited:
            store.lease("x", ttl="30s", wait="0.2s").acquire()
        assert isinstance(waited.value, lh.Held) and isinstance(waited.value, lh.WaitTimeout)
        assert waited.value.name == "x" and waited.value.holders
        # Not waiting at all is no timeout: Held alone.
        with pytest.raises(lh.Held) as refused:
            store.lease("x", ttl="30s").acquire()
        assert not isinstance(refused.value, TimeoutError)
    path = tmp_path / "lock"
    with lh.lock(path):
        with pytest.raises(TimeoutError) as locked:
            lh.lock(path, wait="0.2s")
        assert isinstance(locked.value, lh.Held)


def test_non_json_values_are_type_errors_as_for_json_dumps(sqlite_url: str, tmp_path: Path) -> None:
    queue = lh.Store(sqlite_url).queue("q")
    for value in [{1, 2}, object(), {"b": b"bytes"}]:
        with pytest.raises(TypeError) as dumps:
            json.dumps(value)
        with pytest.raises(TypeError, match="not JSON"):
            lh.write_json(tmp_path / "s.json", value)
        with pytest.raises(TypeError, match="not JSON"):
            queue.add(value)
    # A value JSON has a type for but refuses is still a bad value.
    with pytest.raises(lh.InvalidInput, match="not JSON"):
        lh.write_json(tmp_path / "s.json", float("nan"))
    assert not (tmp_path / "s.json").exists()
    assert dumps.value is not None


def test_a_held_lease_dropped_unreleased_warns_and_is_released(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    lease = store.lease("dropped", ttl="30s").acquire()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lease
        gc.collect()
    said = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert "lease dropped (token 1) was dropped while held" in str(said[0].message)
    status = store.status("dropped")
    assert status is None or not status["grants"]
    # Released ones say nothing.
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        with store.lease("dropped", ttl="30s"):
            pass
        gc.collect()
    assert not [w for w in quiet if issubclass(w.category, ResourceWarning)]


def test_the_with_block_of_a_reported_task_does_not_run(sqlite_url: str) -> None:
    queue = lh.Store(sqlite_url).queue("q")
    queue.add("once")
    task = queue.claim(ttl="30s")
    task.done()
    ran = []
    with pytest.raises(lh.InvalidInput, match=r"has already ended \(done\)"):
        with task:
            ran.append(True)
    assert ran == []


def test_a_sqlite_url_with_a_query_string_is_refused_not_made_a_file(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    for url in [f"sqlite:///{tmp_path}/x.db?mode=ro", "sqlite://x.db?mode=ro", f"sqlite:///{tmp_path}/y.db#f"]:
        with pytest.raises(lh.InvalidInput, match="has a query string or fragment"):
            lh.Store(url)
    assert list(tmp_path.iterdir()) == []
    # A name with '?' in it is still a path, given as one.
    lh.Store(tmp_path / "odd?name.db")
    assert (tmp_path / "odd?name.db").exists()


def test_store_run_takes_a_list_of_str_under_mypy_strict(tmp_path: Path) -> None:
    # A list type is invariant: list[str] was refused by a stub that named
    # only the list of str-or-path. One str stays refused
    # (test_package.py's test_a_type_checker_refuses_a_str_command).
    checked = mypy(
        "from pathlib import Path\n"
        "from typing import List, Tuple\n"
        "import pyleasehold as lh\n"
        "def go(store: lh.Store, argv: List[str], paths: List[Path], both: Tuple[str, Path]) -> int:\n"
        "    return store.run('x', argv) + store.run('x', paths) + store.run('x', both)\n",
        tmp_path,
    )
    assert checked.returncode == 0, checked.stdout
