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
        while self._run_next(wait=False):
            pass

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread (idempotent; not from the worker)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        while self._run_next(wait=True):
            pass

    def _run_next(self, wait: bool) -> bool:
        """Run the next queued call (waiting for one if ``wait``); False when none is left
        (the worker was shut down, or nothing is queued and ``wait`` is False)."""
        with self._changed:
            while wait and not self._calls and not self._closed:
                self._changed.wait()
            if not self._calls:
                return False
            call, future = self._calls.popleft()
        if not future.set_running_or_notify_cancel():
            return True
        failure: BaseException | None = None
        try:
            call()
        except BaseException as error:  # the call's outcome: its future says it
            failure = error
        # Dropped before its future ends: a call's closure holds its tensors (a pooled
        # bucket's block goes back to the pool only when they go), so whoever waits for
        # the future finds them let go.
        del call
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(None)
        return True
