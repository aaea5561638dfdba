"""No crash at interpreter exit (issue 41, defect 13): a leasehold call
blocked on another thread when the main thread returns — or an
``async with`` thread still waking its loop — must not take the GIL while
the interpreter finalizes (src/exiting.rs says why that crashed: exit 139).

Each shape of ``exit_shapes.py`` runs in a child interpreter 20 times on
the oldest and the newest CPython here, with the package this suite
imports (its abi3 extension loads on both), and must exit 0 every time.
``exit_shim.c``, preloaded, makes the bug visible in any build: a thread
that tries to take the GIL while the interpreter finalizes ends the child
with 97 (only some builds segfault on it). The children run in parallel:
they mostly sleep."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import pyleasehold as lh

from conftest import missing

HERE = Path(__file__).resolve().parent
SHAPES = [
    "lease-wait",
    "lock-wait",
    "campaign",
    "run",
    "run-running",
    "claim-wait",
    "asyncio-cancelled",
    "asyncio-done",
    "asyncio-lock-claim-cancelled",
]
RUNS = 20
# The package supports CPython 3.9 and newer (pyproject.toml); the newest
# tested is the newest found, which must be at least this.
OLDEST = (3, 9)
NEWEST_AT_LEAST = (3, 13)


def version_of(python: str) -> Optional[Tuple[int, int]]:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2], sys.implementation.name)"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if len(out) != 3 or out[2] != "cpython":
        return None
    return int(out[0]), int(out[1])


def interpreters() -> Dict[Tuple[int, int], str]:
    """The CPythons here: pyenv's versions, and python3.X on PATH."""
    found: Dict[Tuple[int, int], str] = {}
    candidates: List[str] = []
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if pyenv.is_dir():
        candidates += sorted(str(p) for p in pyenv.glob("3.*/bin/python3") if re.match(r"^3\.\d+\.\d+$", p.parents[1].name))
    candidates += [w for minor in range(9, 30) if (w := shutil.which(f"python3.{minor}"))]
    candidates.append(sys.executable)
    for python in candidates:
        version = version_of(python)
        if version is not None and version >= OLDEST:
            found.setdefault(version, python)
    return found


def oldest_and_newest() -> List[Tuple[Tuple[int, int], str]]:
    found = interpreters()
    if OLDEST not in found:
        missing(
            f"no CPython {OLDEST[0]}.{OLDEST[1]} here (the oldest the package supports): install it "
            f"(pyenv install {OLDEST[0]}.{OLDEST[1]}) to test the exit on it"
        )
    newest = max(found)
    if newest < NEWEST_AT_LEAST:
        missing(
            f"no CPython {NEWEST_AT_LEAST[0]}.{NEWEST_AT_LEAST[1]} or newer here (newest: "
            f"{newest[0]}.{newest[1]}): install one to test the exit on it"
        )
    return [(OLDEST, found[OLDEST]), (newest, found[newest])]


def test_no_crash_at_exit_with_a_call_blocked_on_another_thread(tmp_path: Path) -> None:
    pythons = oldest_and_newest()
    cc = shutil.which("cc")
    if cc is None:
        missing("no C compiler (cc) for exit_shim.c; install the Debian package gcc")
    shim = tmp_path / "exit_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(HERE / "exit_shim.c"), "-ldl"], check=True)
    # The package as this suite imports it, alone on the children's path.
    site = tmp_path / "site"
    site.mkdir()
    (site / "pyleasehold").symlink_to(Path(lh.__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", LD_PRELOAD=str(shim))
    env.pop("LEASEHOLD_STORE", None)

    def child(python: str, shape: str) -> Tuple[int, str, str]:
        where = tempfile.mkdtemp(dir=tmp_path)
        done = subprocess.run(
            [python, "-X", "faulthandler", str(HERE / "exit_shapes.py"), shape, where],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        return done.returncode, done.stdout, done.stderr

    jobs = [(version, python, shape) for version, python in pythons for shape in SHAPES for _ in range(RUNS)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda job: (job, child(job[1], job[2])), jobs))
    took = time.monotonic() - start

    failed: Dict[Tuple[Tuple[int, int], str], List[str]] = {}
    for (version, _, shape), (code, out, err) in results:
        if code != 0 or out.strip() != "ready":
            why = f"exit {code}" + (f" (signal {-code})" if code < 0 else "")
            failed.setdefault((version, shape), []).append(f"{why}: {err.strip()[-600:]}")
    assert not failed, f"{len(jobs)} children in {took:.0f} s; failed: " + "\n".join(
        f"CPython {v[0]}.{v[1]} {shape}: {len(whys)} of {RUNS}; first: {whys[0]}" for (v, shape), whys in failed.items()
    )
