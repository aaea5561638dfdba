"""What ``Queue.aclaim`` and ``pyleasehold.alock`` return: an awaitable that
is also an async context manager (crates/leasehold-py/src/aio.rs runs the
wait off the event loop)."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Awaitable, Callable, Generator, Generic, Optional, Type, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """``await`` it for what it takes (a ``Task``, a ``FileLock``), or enter
    it with ``async with`` — leaving the block ends that as ``with`` would
    (the task reported, the lock released). It starts once."""

    __slots__ = ("_start", "_got")

    def __init__(self, start: Callable[[], Awaitable[T]]) -> None:
        self._start = start
        self._got: Optional[Any] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._start().__await__()

    async def __aenter__(self) -> T:
        got = await self._start()
        self._got = got
        return await got.__aenter__()  # type: ignore[attr-defined,no-any-return]

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        got, self._got = self._got, None
        return await got.__aexit__(exc_type, exc, tb)  # type: ignore[union-attr,no-any-return]
