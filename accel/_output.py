"""Standard output whose reader has gone away (``accel report | head -1``)."""

from __future__ import annotations

import os
import select
import sys


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # None, closed, or not a file (StringIO)
        return None


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has closed it (so a
    ``BrokenPipeError`` came from writing there, not from something else the command did).

    Returns:
        ``True`` when writing to stdout's descriptor would fail for want of a reader.
    """
    fd = _stdout_fd()
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def discard_stdout() -> None:
    """Point stdout at ``/dev/null`` once its reader went away, so that what is still
    written, and the interpreter's last flush, cannot fail again (nothing to do for a
    stdout that is not a descriptor)."""
    fd = _stdout_fd()
    if fd is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
