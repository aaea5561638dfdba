"""Every Python block of README.md and docs/PYTHON.md runs as written.

Each ```python block runs in a fresh interpreter, in an empty directory,
with `$LEASEHOLD_STORE` pointing at a throwaway SQLite store (so
`lh.Store()` is not the user's) and the programs a block starts
(`./publish.sh`) standing in as small scripts — as the CLI's README test
does for shell lines (crates/leasehold-cli/tests/readme.rs). Each is also
checked with `mypy --strict`. A block marked `<!-- excerpt: PATH -->` is a
part of a program the suite runs (tests/test_seeds.py): it must be a
verbatim, contiguous part of that file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest

from conftest import REPO

DOCS = [REPO / "README.md", REPO / "docs" / "PYTHON.md"]
EXCERPT = re.compile(r"^<!-- excerpt: (\S+) -->$")

#: The programs blocks start, as stand-ins.
STAND_INS = {"publish.sh": "#!/bin/sh\necho publishing with token \"$LEASEHOLD_TOKEN\"\n"}


@dataclass
class Block:
    doc: Path
    line: int
    text: str
    excerpt_of: Optional[str]

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}"


def python_blocks(doc: Path) -> List[Block]:
    blocks: List[Block] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = start
            while lines[end].strip() != "```":
                end += 1
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marked = EXCERPT.match(before.strip())
            blocks.append(Block(doc, start, "\n".join(lines[start:end]) + "\n", marked.group(1) if marked else None))
            i = end
        i += 1
    return blocks


BLOCKS = [b for doc in DOCS for b in python_blocks(doc)]


def test_the_docs_python_blocks_are_found() -> None:
    # A parser that found nothing would pass every test below.
    assert {b.doc.name for b in BLOCKS} == {"README.md", "PYTHON.md"}
    assert sum(1 for b in BLOCKS if b.excerpt_of) == 2
    assert sum(1 for b in BLOCKS if not b.excerpt_of) >= 2


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.excerpt_of], ids=lambda b: b.id)
def test_an_excerpt_is_a_verbatim_part_of_a_program_the_suite_runs(block: Block) -> None:
    assert block.excerpt_of is not None
    program = (REPO / block.excerpt_of).read_text()
    assert block.text in program, f"{block.id} is not a verbatim part of {block.excerpt_of}"
    assert (REPO / "crates/leasehold-py/tests/test_seeds.py").read_text().count(Path(block.excerpt_of).stem) > 0


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.excerpt_of], ids=lambda b: b.id)
def test_a_python_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name, text in STAND_INS.items():
        (work / name).write_text(text)
        (work / name).chmod(0o755)
    snippet = tmp_path / "snippet.py"
    snippet.write_text(block.text)
    env = {
        **os.environ,
        "LEASEHOLD_STORE": f"sqlite://{tmp_path / 'store.db'}",
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    ran = subprocess.run(
        [sys.executable, str(snippet)], cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, f"{block.id} failed as written:\n{ran.stderr}"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, str(snippet)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, f"{block.id}: mypy --strict:\n{checked.stdout}"
