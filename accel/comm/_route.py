"""The one decision of which way a collective goes: shared memory on this node, two levels
across nodes, or torch.distributed. Every public collective in :mod:`accel.comm` asks
here, and through them the ``"accel"`` backend's collectives; the backend itself names a
group's :class:`Way` only to hand to gloo at once what accel.comm would not take."""

from __future__ import annotations

import enum

import torch
import torch.distributed as dist

from accel.comm._segment import ShmGroup, shm_group, spanning_of
from accel.comm._spanning import Spanning


class Way(enum.Enum):
    """Where a collective's bytes go."""

    SHARED = "shared memory on this node"
    TWO_LEVEL = "shared memory in each node, torch.distributed between nodes"
    TORCH = "torch.distributed"


def route(
    group: dist.ProcessGroup | None, call: str, *, uneven: bool = True
) -> ShmGroup | Spanning | None:
    """The way for ``call`` on ``group``, setting the group up on its first call: its
    segment (``Way.SHARED``), its levels (``Way.TWO_LEVEL``) or ``None`` (``Way.TORCH``).
    (The object itself, not a record around it: this runs in every small all-reduce.)

    Collective the first time: every rank calls it, whatever its tensors. Two levels need
    eager mode (torch.compile cannot trace their calls) and, unless ``uneven``, the same
    number of ranks on every node.
    """
    shm = shm_group(group, call)
    if shm is not None:
        return shm
    if torch.compiler.is_compiling():
        return None
    spanning = spanning_of(group)
    return spanning if spanning is not None and (uneven or spanning.even) else None
