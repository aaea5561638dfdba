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

The main thread hears of a loss once: when it is told by a raise first —
``check()`` or ``renew()`` raising ``LeaseLost`` there — the interrupt
queued for the same loss is skipped (:func:`withdraw`); otherwise a
handler (``except``/``finally``) of the first would get the second.

The signal is a real-time one (``SIGRTMIN + 7``), to stay out of the way
of ``SIGUSR1``/``SIGUSR2``; a handler already installed for it is called for
signals that are not ours.
"""

from __future__ import annotations

import collections
import signal
import threading
from types import FrameType
from typing import Any, Callable, Deque, Optional, Tuple, Union

from ._errors import InvalidInput

SIGNAL: int = signal.SIGRTMIN + 7

_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, None]

#: The attribute of a ``LeaseLost`` naming the loss (its grant: "lease l
#: (token 7)"), set by the package when it queues one here.
KEY = "_leasehold_lost"

# Losses waiting for the main thread, with their keys; the keys of those
# the main thread was told of by a raise meanwhile, skipped once each.
# Deque appends, pops, `in` and `remove` (of str keys) are atomic under the
# GIL: no lock, which the handler could not take while the main thread it
# interrupts held it.
_pending: Deque[Tuple[str, BaseException]] = collections.deque()
_told: Deque[str] = collections.deque(maxlen=1024)
_previous: _Handler = None
_installed = False


def _handler(signum: int, frame: Optional[FrameType]) -> None:
    ours = False
    while True:
        try:
            key, lost = _pending.popleft()
        except IndexError:
            break
        ours = True
        if key and key in _told:
            _told.remove(key)
            continue
        raise lost
    if not ours and callable(_previous):
        _previous(signum, frame)


def _deliver(lost: BaseException) -> None:
    """Called on a keeper's thread when the grant is lost."""
    _pending.append((str(getattr(lost, KEY, "")), lost))
    ident = threading.main_thread().ident
    if ident is not None:
        signal.pthread_kill(ident, SIGNAL)


def withdraw(key: str) -> None:
    """The calling thread is about to raise the loss `key` itself, which a
    keeper has queued here (or is about to): if it is the main thread, the
    queued one is skipped, not raised a second time."""
    if threading.current_thread() is threading.main_thread():
        _told.append(key)


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
    _told.clear()
