"""The one decision of which way a collective goes: shared memory on this node, two levels
across nodes, or torch.distributed. Every public collective in :mod:`accel.comm` and every
collective of the ``"accel"`` backend asks here."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accel.comm._segment import ShmGroup, shm_group, spanning_of
from accel.comm._spanning import Spanning


class Way(enum.Enum):
    """Where a collective's bytes go."""

    SHARED = "shared memory on this node"
    TWO_LEVEL = "shared memory in each node, torch.distributed between nodes"
    TORCH = "torch.distributed"


@dataclass(frozen=True, slots=True)
class Route:
    """A collective's way, with the group's segment (``SHARED``) or levels (``TWO_LEVEL``)."""

    way: Way
    shm: ShmGroup | None = None
    spanning: Spanning | None = None


def route(group: dist.ProcessGroup | None, call: str, *, uneven: bool = True) -> Route:
    """The way for ``call`` on ``group``, setting the group up on its first call.

    Collective the first time: every rank calls it, whatever its tensors. Two levels need
    eager mode (torch.compile cannot trace their calls) and, unless ``uneven``, the same
    number of ranks on every node.
    """
    shm = shm_group(group, call)
    if shm is not None:
        return Route(Way.SHARED, shm=shm)
    if not torch.compiler.is_compiling():
        spanning = spanning_of(group)
        if spanning is not None and (uneven or spanning.even):
            return Route(Way.TWO_LEVEL, spanning=spanning)
    return Route(Way.TORCH)
