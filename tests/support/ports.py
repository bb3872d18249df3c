"""A TCP port for a job the tests launch by hand (MASTER_PORT, a rendezvous endpoint).

Taken below the kernel's ephemeral range: a port the kernel hands out (``bind(0)``, as
torchrun --standalone and gloo's listeners do) can never be it. A port found with
``bind(0)`` and released could be handed to another concurrent job's gloo listener before
this job's store binds it, and the two jobs' connections would then cross: the other job
aborts ("terminate called without an active exception").
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_FLOOR = 10_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A port below the ephemeral range that nothing listens on now."""
    ceiling = _ephemeral_start()
    for _ in range(100):
        port = random.randrange(_FLOOR, ceiling)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port in {_FLOOR}..{ceiling - 1} after 100 tries")
