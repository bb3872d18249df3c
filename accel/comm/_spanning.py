"""Where a group's ranks are, and the sub-groups of its two levels.

Inside each node the ranks share memory; between nodes the bytes go over gloo. With the
same number of ranks L on every node, each rank gets the gloo sub-group of the ranks at its
position on every node (the L sub-groups run at once), and each rank sends only its 1/L
share between nodes; with uneven placement (3 ranks here, 1 there) one
leader per node talks to the other leaders. The collectives themselves are in
:mod:`accel.comm._two_level`.

The placement comes from the ranks' node identities (:mod:`accel.comm._nodes`), gathered
when the group is first used; sub-groups are made then, with
``use_local_synchronization`` (only their members take part), and are kept per set of
ranks for the life of the process: torch names such groups after their ranks, and making
one again after destroying it hangs (tests/comm/scripts/subgroup_remake_repro.py).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from accel.comm import _torch_dist as tdist


@dataclass(frozen=True)
class Placement:
    """Where a group's ranks are: global ranks per node, in group-rank order."""

    nodes: tuple[tuple[int, ...], ...]
    ranks: tuple[int, ...]  # the group's global ranks, in group-rank order

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
    return Placement(tuple(tuple(ranks) for ranks in nodes.values()), tuple(global_ranks))


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

    @functools.cached_property
    def block_order(self) -> tuple[int, ...]:
        """The group ranks whose blocks an all-gather over the levels (even placement)
        leaves in each place: local-group rank major, position-group rank minor (torch
        orders a sub-group's ranks by global rank). A reduce-scatter hands blocks out in
        the same order."""
        group_rank = {global_rank: index for index, global_rank in enumerate(self.where.ranks)}
        order: list[int] = []
        for member in sorted(self.node):
            position = self.node.index(member)
            peers = sorted(node[position] for node in self.where.nodes)
            order.extend(group_rank[peer] for peer in peers)
        return tuple(order)


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
