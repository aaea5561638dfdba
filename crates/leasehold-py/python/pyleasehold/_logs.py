"""The native layer's events in Python's ``logging``, logger ``pyleasehold``.

The native side queues each event and, for one at the logger's level or
above, writes a byte to a pipe; this daemon thread, blocked in ``select``
on it (Python's own call; stopped at exit before the interpreter
finalizes), takes the queue and logs every event the logger is enabled
for — at once, or within a second for one the logger's level had kept
from waking it. A record's ``leasehold`` attribute holds the event's fields
(``event``, ``name``, ``token``, ...): docs/LOGGING.md lists them.
(crates/leasehold-py/src/logs.rs says why no thread of ours calls
``logging`` itself.)
"""

import logging
import os
import select
import threading
from typing import Optional

from . import _native

LOGGER = logging.getLogger("pyleasehold")

#: How often the reader looks at the logger's level without an event.
LOOK = 1.0

_fd: Optional[int] = None
_reader: Optional[threading.Thread] = None


def _pump(fd: int) -> None:
    while True:
        # Woken by an event at the logger's level, or each second: the
        # logger's level may have come down since (logging configured
        # after the import), and what waits below it is logged then.
        try:
            ready, _, _ = select.select([fd], [], [], LOOK)
            if ready and not os.read(fd, 4096):
                return
        except OSError:
            return
        for level, message, fields in _native.log_take(LOGGER.getEffectiveLevel()):
            if LOGGER.isEnabledFor(level):
                LOGGER.log(level, "%s", message, extra={"leasehold": fields})


def start() -> None:
    """A pipe and a reader (at import)."""
    global _fd, _reader
    _fd = _native.log_pipe()
    _reader = threading.Thread(target=_pump, args=(_fd,), name="pyleasehold-log", daemon=True)
    _reader.start()


def stop() -> None:
    """At exit, before the interpreter finalizes: the reader logs what is
    queued and returns (a thread that takes the GIL during finalization
    is ended by ``pthread_exit``: crates/leasehold-py/src/exiting.rs).
    Events after this are not logged."""
    _native.log_close()
    if _reader is not None and _reader is not threading.current_thread():
        _reader.join(timeout=2)


def after_fork_in_child() -> None:
    """A child made by ``os.fork()`` has its parent's descriptor but not
    its reader: a pipe and a reader of its own, where the parent had one."""
    global _fd
    if _fd is None:
        return
    try:
        os.close(_fd)
    except OSError:
        pass
    start()
