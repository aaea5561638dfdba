"""Bad input: hostile names, corrupt stores and files, stores that are
down — each the documented exception, and nothing lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import pyleasehold as lh

from conftest import free_port


@pytest.mark.parametrize("name", ["", "x" * 256, "a\nb", "tab\there", "nul\0"])
def test_hostile_names_are_refused_before_anything_is_written(sqlite_url: str, name: str) -> None:
    store = lh.Store(sqlite_url)
    with pytest.raises(lh.InvalidName):
        store.lease(name)
    with pytest.raises(lh.InvalidName):
        store.queue(name)
    with pytest.raises(lh.InvalidName):
        store.run(name, ["true"])


def test_a_name_is_never_a_path(sqlite_url: str, tmp_path: Path) -> None:
    store = lh.Store(sqlite_url)
    with store.lease("../../etc/passwd") as lease:
        assert lease.name == "../../etc/passwd"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leasehold.db", "leasehold.db-shm", "leasehold.db-wal"]


def test_a_corrupt_store_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "junk.db"
    junk = b"not a database at all\n" * 100
    db.write_bytes(junk)
    with pytest.raises(lh.BadData, match="corrupt or not a leasehold store"):
        lh.Store(f"sqlite://{db}")
    assert db.read_bytes() == junk


def test_stores_that_are_down_are_unavailable() -> None:
    port = free_port()
    with pytest.raises(lh.StoreUnavailable):
        lh.Store(f"postgres://postgres@127.0.0.1:{port}/postgres?connect_timeout=2")
    if lh.ETCD:
        with pytest.raises(lh.StoreUnavailable):
            lh.Store(f"etcd://127.0.0.1:{port}")
    else:
        with pytest.raises(lh.Unsupported, match="etcd"):
            lh.Store(f"etcd://127.0.0.1:{port}")


def test_malformed_urls_are_invalid_input() -> None:
    # A password in a URL is refused (a command line shows in `ps`), and its
    # message does not repeat it.
    urls = ["redis://h:1?password=hunter2", "redis://:hunter2@h:1", "sqlite://", "nonsense", "etcd://h:1?password=hunter2"]
    for url in urls:
        with pytest.raises(lh.InvalidInput) as raised:
            lh.Store(url)
        assert "hunter2" not in str(raised.value)


def test_a_corrupt_state_file_is_refused_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"runs": 1')
    with pytest.raises(lh.BadData, match="corrupt"):
        lh.update_json(state, lambda s: s, default={})
    assert state.read_text() == '{"runs": 1'
    fence = tmp_path / "out.json.fence"
    fence.write_text("not a token")
    with pytest.raises(lh.BadData, match="fence record"):
        lh.write_atomic(tmp_path / "out.json", "x", fence=5)
    assert not (tmp_path / "out.json").exists()


def test_symlinks_and_odd_paths_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(lh.InvalidInput, match="symbolic link"):
        lh.write_atomic(link, "x")
    with pytest.raises(lh.InvalidInput, match="symbolic link"):
        lh.lock(link)
    assert target.read_text() == "keep"
    with pytest.raises(lh.InvalidInput, match="not valid JSON|not JSON"):
        lh.write_json(tmp_path / "x.json", float("nan"))
    with pytest.raises(TypeError):
        lh.write_atomic(tmp_path / "x", 5)  # type: ignore[arg-type]


def test_a_store_down_mid_lease_is_reported_and_nothing_is_lost(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    lh.write_json(state, {"kept": True})
    store = lh.Store(f"sqlite://{tmp_path / 'l.db'}")
    store.close()
    with pytest.raises(lh.InvalidInput, match="closed"):
        store.lease("x").acquire()
    assert json.loads(state.read_text()) == {"kept": True}
    os.chmod(tmp_path, 0o500)
    try:
        if os.geteuid() != 0:
            with pytest.raises(lh.PermissionDenied):
                lh.write_json(state, {"kept": False})
    finally:
        os.chmod(tmp_path, 0o700)
    assert json.loads(state.read_text()) == {"kept": True}


import unicodedata  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_store = lh.Store(f"sqlite://{__import__('tempfile').mkdtemp()}/props.db")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_name_is_accepted_as_given_or_refused_as_invalid(name: str) -> None:
    # Blank (only whitespace) is refused too: it would show as nothing.
    invalid = (
        name == ""
        or name.isspace()
        or len(name.encode()) > 255
        or any(unicodedata.category(c) == "Cc" for c in name)
    )
    try:
        lease = _store.lease(name)
    except lh.InvalidName:
        assert invalid, repr(name)
        return
    assert not invalid, repr(name)
    assert lease.name == name


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(allow_nan=True), st.integers(min_value=-(10**12), max_value=10**12), st.text(max_size=12)))
def test_any_duration_is_taken_or_refused_as_invalid_input(ttl: object) -> None:
    try:
        lease = _store.lease("d", ttl=ttl)  # type: ignore[arg-type]
    except lh.InvalidInput:
        return
    assert lease.ttl >= 0
