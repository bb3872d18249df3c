"""Which node a process runs on: what decides whether ranks can share memory.

Two processes are on the same node when their host name and kernel boot id match.
``ACCEL_NODE_ID`` overrides that, read once per process: ranks of one host given
different values count as different nodes, which is how the two-level (multi-node)
collectives are tested on one machine, and ranks given the same value count as one node
(only correct where they really share a kernel: the shared segment is opened through
``/proc``).
"""

from __future__ import annotations

import functools
import os
import socket

NODE_ENV = "ACCEL_NODE_ID"
_MAX_LENGTH = 128


@functools.cache
def node_identity() -> str:
    """This process's node identity (``ACCEL_NODE_ID``'s value when set).

    Raises:
        ValueError: ``ACCEL_NODE_ID`` is set but empty, too long or not one printable word.
    """
    override = os.environ.get(NODE_ENV)
    if override is not None:
        if (
            not override
            or len(override) > _MAX_LENGTH
            or not override.isprintable()
            or any(c.isspace() for c in override)
        ):
            raise ValueError(
                f"{NODE_ENV}={override!r}: expected 1 to {_MAX_LENGTH} printable characters "
                "without spaces (one name per simulated node)"
            )
        return f"env:{override}"
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = ""
    return f"{socket.gethostname()}/{boot_id}"
