"""Standard output whose reader has gone away."""

from __future__ import annotations

import os
import sys


def discard_stdout() -> None:
    """Point stdout at ``/dev/null`` once its reader went away (``| head``), so that what
    is still written, and the interpreter's last flush, cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
