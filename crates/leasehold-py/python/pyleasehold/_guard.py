"""The guard program of ``store.run``, shipped in the package.

``store.run`` starts this interpreter as its guard —
``python -I -S -c "...; from pyleasehold._guard import main; main()" __guard ...``
(``sys._pyleasehold_guard`` set first: the package then starts no thread).
The guard itself is the library's (``leasehold::supervise::guard``), compiled into
the extension module: this only hands it the arguments. Why a separate
process, and what it guarantees: ``crates/leasehold/src/supervise/guard/mod.rs``.
"""

from __future__ import annotations

import sys

from ._native import guard_main


def main() -> None:
    """Run the guard with this process's arguments."""
    sys.exit(guard_main(sys.argv[1:]))
