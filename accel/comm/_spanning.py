"""Two-level sums for a group whose ranks sit on several nodes.

Inside each node the ranks share memory; between nodes the bytes go over gloo. With the
same number of ranks L on every node, ``all_reduce`` is a reduce-scatter inside the node
(shared memory), an all-reduce of each rank's 1/L share with the ranks at the same local
position on the other nodes (gloo; the L sub-groups run at once), and an all-gather inside
the node: each rank sends about 1/L of what flat gloo sends between nodes. With uneven
placement (3 ranks here, 1 there) the node sums first, one leader per node all-reduces the
whole tensor over gloo, and the node's leader broadcasts it. A broadcast goes over gloo to
one rank per node (those at the source's position, or the leaders), then through each
node's memory. (Both are in ``accel.comm``: they are made of its collectives.)

The placement comes from the ranks' node identities (:mod:`accel.comm._nodes`), gathered
when the group is first used; sub-groups are made then, with
``use_local_synchronization`` (only their members take part), and are kept per set of
ranks for the life of the process (torch names such groups after their ranks, so making
one twice fails).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from accel.comm import _torch_dist as tdist


@dataclass(frozen=True)
class Placement:
    """Where a group's ranks are: global ranks per node, in group-rank order."""

    nodes: tuple[tuple[int, ...], ...]

    @property
    def even(self) -> bool:
        """Whether every node holds the same number of the group's ranks."""
        return len({len(node) for node in self.nodes}) == 1

    def node_of(self, global_rank: int) -> tuple[int, ...]:
        """The global ranks on ``global_rank``'s node."""
        return next(node for node in self.nodes if global_rank in node)


def placement(identities: list[str], global_ranks: list[int]) -> Placement:
    """Group ranks by node identity (nodes in order of their first rank)."""
    nodes: dict[str, list[int]] = {}
    for identity, global_rank in zip(identities, global_ranks, strict=True):
        nodes.setdefault(identity, []).append(global_rank)
    return Placement(tuple(tuple(ranks) for ranks in nodes.values()))


_subgroups: dict[tuple[int, ...], dist.ProcessGroup] = {}
_subgroups_lock = threading.Lock()


def _subgroup(ranks: tuple[int, ...], timeout: float) -> dist.ProcessGroup:
    """The gloo group of ``ranks`` (made by its members only, once per process)."""
    with _subgroups_lock:
        group = _subgroups.get(ranks)
        if group is None:
            made = tdist.new_group(
                list(ranks), timeout=timedelta(seconds=timeout), backend="gloo",
                use_local_synchronization=True,
            )  # fmt: skip
            assert isinstance(made, dist.ProcessGroup)  # this rank is a member
            group = _subgroups[ranks] = made
        return group


@dataclass
class Spanning:
    """One multi-node group's two levels, as this rank takes part in them."""

    local: dist.ProcessGroup  # this node's ranks of the group (gloo; accel.comm's segment)
    across: dist.ProcessGroup | None  # same local position on every node, or the leaders
    even: bool
    node: tuple[int, ...]  # global ranks on this node; the first leads (uneven placement)
    where: Placement  # every node's ranks

    @property
    def local_size(self) -> int:
        """How many of the group's ranks share this node."""
        return len(self.node)


def build(where: Placement, rank: int, timeout: float) -> Spanning | None:
    """This rank's two levels of a group placed as ``where`` (collective over the group:
    every rank calls it, in the same order); None where one level would do (a node per
    rank: flat gloo already is the cross-node level)."""
    if max(len(node) for node in where.nodes) == 1:
        return None
    mine = where.node_of(rank)
    local = _subgroup(mine, timeout)
    if where.even:
        position = mine.index(rank)
        across: dist.ProcessGroup | None = _subgroup(
            tuple(node[position] for node in where.nodes), timeout
        )
    else:
        leaders = tuple(node[0] for node in where.nodes)
        across = _subgroup(leaders, timeout) if rank in leaders else None
    return Spanning(local, across, where.even, mine, where)
