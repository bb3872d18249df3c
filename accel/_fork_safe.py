"""Locks that a child process made by ``fork()`` finds free.

A child has only the thread that forked. A lock another thread of the parent held at that
moment (choosing the accelerator behind a slow probe, discovering plugins) stays held in
the child by no one, and the child's first use of it waits forever: a DataLoader worker
or a ``multiprocessing`` child forked at the wrong moment hangs. Each lock made here is
made new in the child instead; what it guarded is computed again there if the parent's
thread had not finished (the guarded state is only ever set once complete).
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType


class ForkSafeLock:
    """A non-reentrant lock, used as a context manager, that is free in a forked child
    unless the thread that forked held it (the child's one thread then holds it still, and
    releases it where its ``with`` block ends)."""

    __slots__ = ("__weakref__", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        _made.add(self)

    def acquire(self, timeout: float = -1) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (-1: for as long as it takes).

        Args:
            timeout: As :meth:`threading.Lock.acquire`'s.

        Returns:
            Whether the lock was taken.
        """
        if not self._lock.acquire(timeout=timeout):
            return False
        self._owner = threading.get_ident()
        return True

    def release(self) -> None:
        """Give the lock back (taken by :meth:`acquire`)."""
        self._owner = None
        self._lock.release()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _renew(self) -> None:
        # In the child, the forking thread keeps its ident; every other thread is gone.
        self._lock = threading.Lock()
        if self._owner == threading.get_ident():
            self._lock.acquire()
        else:
            self._owner = None


_made: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def _renew_all() -> None:
    for lock in list(_made):
        lock._renew()  # pyright: ignore[reportPrivateUsage]


os.register_at_fork(after_in_child=_renew_all)
