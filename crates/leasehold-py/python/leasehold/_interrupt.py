"""``on_lost="interrupt"``: ``LeaseLost`` raised in the main thread.

When a grant kept with ``on_lost="interrupt"`` is lost, its keeper (a Rust
thread) queues the ``LeaseLost`` here and sends :data:`SIGNAL` to the main
thread with ``pthread_kill``. Python runs the handler below in the main
thread at its next bytecode — at once in a Python loop, and a blocking call
that Python retries on ``EINTR`` (``time.sleep``, socket and file reads,
``subprocess`` waits, lock acquires) is cut short — and the handler raises
the ``LeaseLost``. What it cannot stop: code that runs no Python bytecode
(a long computation inside a C extension, a call that holds the GIL), other
threads, a process that is itself stopped (``SIGSTOP``, a debugger) —
there, fence the writes — and an ``except Exception:`` that swallows it.
docs/PYTHON.md says the same to users.

The signal is a real-time one (``SIGRTMIN + 7``), to stay out of the way
of ``SIGUSR1``/``SIGUSR2``; a handler already installed for it is called for
signals that are not ours.
"""

from __future__ import annotations

import collections
import signal
import threading
from types import FrameType
from typing import Any, Callable, Deque, Optional, Union

from ._errors import InvalidInput

SIGNAL: int = signal.SIGRTMIN + 7

_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, None]

# Losses waiting for the main thread; deque appends and pops are atomic.
_pending: Deque[BaseException] = collections.deque()
_previous: _Handler = None
_installed = False


def _handler(signum: int, frame: Optional[FrameType]) -> None:
    try:
        lost = _pending.popleft()
    except IndexError:
        if callable(_previous):
            _previous(signum, frame)
        return
    raise lost


def _deliver(lost: BaseException) -> None:
    """Called on a keeper's thread when the grant is lost."""
    _pending.append(lost)
    ident = threading.main_thread().ident
    if ident is not None:
        signal.pthread_kill(ident, SIGNAL)


def arm() -> Callable[[BaseException], None]:
    """Install the handler (once; signal handlers can only be installed by
    the main thread) and return what a keeper calls on loss."""
    global _installed, _previous
    if not _installed:
        if threading.current_thread() is not threading.main_thread():
            raise InvalidInput(
                "on_lost='interrupt' raises LeaseLost in the main thread, and only the main thread can set "
                "that up: create the lease (or claim) there, or pass a callable as on_lost"
            )
        _previous = signal.signal(SIGNAL, _handler)
        _installed = True
    return _deliver


def after_fork_in_child() -> None:
    """A forked child holds none of its parent's grants: nothing of theirs
    may interrupt it."""
    _pending.clear()
