"""One thread that runs a group's queued calls in the order they were queued.

What :class:`concurrent.futures.ThreadPoolExecutor` with one worker does, plus
:meth:`SerialWorker.run_queued`: the worker thread itself, inside one call (a reduction's
``then``-callbacks run there), can run every call queued so far at once, in order. A
callback that issues a collective and waits for it then neither waits for itself nor
jumps ahead of the calls issued before it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future


class SerialWorker:
    """Runs submitted calls one at a time, in submission order, on one daemon thread
    (started by the first call; :meth:`shutdown` stops it, as the group does at exit)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: deque[tuple[Callable[[], None], Future[None]]] = deque()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, call: Callable[[], None]) -> Future[None]:
        """Queue ``call``; its future ends with its outcome.

        Raises:
            RuntimeError: The worker was shut down.
        """
        future: Future[None] = Future()
        with self._changed:
            if self._closed:
                raise RuntimeError(f"{self._name}: cannot queue a call after shutdown")
            self._calls.append((call, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify()
        return future

    def running_here(self) -> bool:
        """Whether the calling thread is the worker (inside a call, or its callbacks)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def run_queued(self) -> None:
        """On the worker: run every call queued so far, in order, before returning."""
        assert self.running_here(), "run_queued is for the worker thread"
        while True:
            with self._changed:
                if not self._calls:
                    return
                call, future = self._calls.popleft()
            _run(call, future)
            del call, future  # as in _loop

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread (idempotent; not from the worker)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._calls and not self._closed:
                    self._changed.wait()
                if not self._calls:
                    return
                call, future = self._calls.popleft()
            _run(call, future)
            # Not kept until the next call: a call's closure holds its tensors (a pooled
            # bucket's block goes back to the pool only when they go).
            del call, future


def _run(call: Callable[[], None], future: Future[None]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        call()
    except BaseException as error:  # the call's outcome: its future says it
        future.set_exception(error)
    else:
        future.set_result(None)
