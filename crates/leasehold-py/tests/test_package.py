"""The package as a type checker, `help()` and pip see it: stubs that match
the module, types that catch a str command, every parameter documented,
documents whose keys are the TypedDicts', and a shared object without debug
information."""

from __future__ import annotations

import inspect
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

import pyleasehold as lh

from conftest import REPO


def mypy(source: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "program.py"
    program.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, str(program)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_stubs_match_the_module() -> None:
    # mypy's stubtest imports the module and compares every name, signature
    # and default with _native.pyi.
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "pyleasehold", "--mypy-config-file", os.devnull],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_type_checker_refuses_a_str_command(tmp_path: Path) -> None:
    checked = mypy(
        "import pyleasehold as lh\n"
        "store = lh.Store()\n"
        'store.run("job", ["echo", "hi"])\n'
        'store.run("job", ("echo", "hi"))\n',
        tmp_path,
    )
    assert checked.returncode == 0, checked.stdout
    checked = mypy('import pyleasehold as lh\nlh.Store().run("job", "echo hi")\n', tmp_path)
    # store.run is overloaded on capture_output: no variant takes one str.
    refused = 'No overload variant of "run" of "Store" matches argument types "str", "str"'
    assert checked.returncode == 1 and refused in checked.stdout, checked.stdout


def test_a_str_command_and_a_bool_token_are_refused_at_run_time(sqlite_url: str, tmp_path: Path) -> None:
    store = lh.Store(sqlite_url)
    for argv in ("echo hi", b"echo hi"):
        with pytest.raises(TypeError, match=r"argv must be a list of arguments, not a single (str|bytes)"):
            store.run("job", argv)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argv\[1\] must be a str \(or a path\), not int"):
        store.run("job", ["echo", 1])  # type: ignore[list-item]
    assert store.run("job", ("true",)) == 0
    assert store.run("job", [Path("/bin/sh"), "-c", "exit 3"]) == 3
    for token in (True, False):
        with pytest.raises(TypeError, match="fence must be a lease, a task or a fencing token"):
            lh.write_atomic(tmp_path / "out", "x", fence=token)
        with pytest.raises(TypeError, match="fence must be a lease, a task or a fencing token"):
            store.fence("job", token)
    with pytest.raises(TypeError, match="not str"):
        store.fence("job", "7")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def public_callables() -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    for name in lh.__all__:
        obj = getattr(lh, name)
        if inspect.isclass(obj) and obj.__module__ == "pyleasehold" and not issubclass(obj, BaseException):
            found[name] = obj
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and callable(member):
                    found[f"{name}.{attr}"] = member
        elif inspect.isbuiltin(obj) or inspect.isfunction(obj):
            found[name] = obj
    return found


def test_help_documents_every_parameter() -> None:
    undocumented: List[str] = []
    for where, obj in public_callables().items():
        try:
            parameters = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue  # a class without a constructor
        doc = inspect.getdoc(obj) or ""
        for p in parameters:
            if p not in ("self", "cls") and not re.search(rf"\b{p}\b", doc):
                undocumented.append(f"{where}({p})")
    assert undocumented == [], f"help() says nothing of: {', '.join(undocumented)}"
    # The class a user meets first, as help() shows it.
    text = subprocess.run(
        [sys.executable, "-c", "import pyleasehold as lh; help(lh.Store)"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PAGER": "cat", "TERM": "dumb"},
    ).stdout
    for words in ("Store(url=None, *, allow_network_fs=False)", "allow_network_fs", "lease(self, /, name"):
        assert words in text, f"help(lh.Store) lacks {words!r}"


def keys_of(typed_dict: Any) -> Set[str]:
    return set(typed_dict.__annotations__)


def test_the_documents_have_the_typed_keys_and_python_times(sqlite_url: str) -> None:
    import datetime

    store = lh.Store(sqlite_url)
    with store.lease("d", ttl="1m") as lease:
        state = store.status("d")
        assert state is not None and set(state) == keys_of(lh.LeaseStatus)
        (grant,) = state["grants"]
        assert set(grant) == keys_of(lh.GrantInfo)
        assert grant["token"] == lease.token and grant["grant_id"] == lease.grant
        assert isinstance(grant["expires"], datetime.datetime) and grant["expires"].tzinfo is not None
        assert grant["ttl"] == datetime.timedelta(minutes=1)
        assert datetime.timedelta(0) < grant["expires_in"] <= datetime.timedelta(minutes=1)
        now = datetime.datetime.now(datetime.timezone.utc)
        assert abs(grant["acquired"] - now) < datetime.timedelta(minutes=1)
        assert [s["name"] for s in store.list()] == ["d"] == [s["name"] for s in store.list(live=True)]
    entries = store.history("d")
    assert [e["event"] for e in entries] == ["released", "granted"], entries
    assert all(set(e) == keys_of(lh.HistoryEntry) and isinstance(e["at"], datetime.datetime) for e in entries)
    assert len(store.history("d", limit=1)) == 1
    q = store.queue("q")
    # A payload's own fields are the user's: never converted.
    payload = {"at": "2020-01-01T00:00:00.000Z", "ttl_ms": 5, "grants": []}
    q.add(payload, id="t")
    task = q.get("t")
    assert task is not None and set(task) == keys_of(lh.TaskInfo)
    assert task["payload"] == payload and isinstance(task["created_at"], datetime.datetime)
    assert [t["id"] for t in q.list()] == ["t"] == [t["id"] for t in q.list(state="pending")]
    assert q.list(state="done") == []


def elf_sections(path: Path) -> List[str]:
    """The section names of an ELF file (64-bit little-endian), read here
    rather than by the tools that made it."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF file"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    names = []
    for h in headers:
        start = names_at + h[0]
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


def test_the_shared_object_carries_no_debug_information() -> None:
    native = Path(lh._native.__file__)
    sections = elf_sections(native)
    assert ".text" in sections
    debug = [s for s in sections if s.startswith((".debug", ".zdebug")) or s == ".symtab"]
    assert debug == [], f"{native.name} ships {debug} ({native.stat().st_size / 1e6:.1f} MB)"


def test_the_version_is_the_workspaces() -> None:
    """`leasehold.__version__` is the version the workspace builds — the
    same as `leasehold --version` of the command a wheel carries."""
    manifest = (REPO / "Cargo.toml").read_text()
    match = re.search(r'^\[workspace\.package\]\nversion = "([^"]+)"', manifest, re.M)
    assert match, "no workspace version in Cargo.toml"
    assert lh.__version__ == match.group(1)
