"""Where a group's ranks are, and the sub-groups of its two levels.

Inside each node the ranks share memory; between nodes the bytes go over gloo. With the
same number of ranks L on every node, each rank gets the gloo sub-group of the ranks at its
position on every node (the L sub-groups run at once), and each rank sends only its 1/L
share between nodes; with uneven placement (3 ranks here, 1 there) one
leader per node talks to the other leaders. The collectives themselves are in
:mod:`accel.comm._two_level`.

The placement comes from the ranks' node identities (:mod:`accel.comm._nodes`), gathered
when the group is first used; the levels' gloo contexts are made then, as
:class:`~accel.comm._link.Link` objects of this group alone (named from a token the group's
setup shares, never torch.distributed groups: :mod:`accel.comm._link` says why), and live
as long as the group.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accel.comm._link import Link

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store  # pyright: ignore[reportMissingModuleSource]


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


@dataclass
class Spanning:
    """One multi-node group's two levels, as this rank takes part in them."""

    local: Link  # this node's ranks of the group
    across: Link | None  # same local position on every node, or the leaders
    even: bool
    node: tuple[int, ...]  # global ranks on this node; the first leads (uneven placement)
    where: Placement  # every node's ranks
    # The node's segment (an accel.comm._segment.ShmGroup; None: its ranks fall back to
    # gloo on the local link), set once the link is up.
    local_shm: Any = None

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


def build(where: Placement, rank: int, timeout: float, store: Store, token: str) -> Spanning | None:
    """This rank's two levels of a group placed as ``where`` (collective over the group:
    every rank calls it, in the same order, with the same ``token``, which names the
    group's links apart from every other group's); None where one level would do (a node
    per rank: flat gloo already is the cross-node level)."""
    if max(len(node) for node in where.nodes) == 1:
        return None

    def link(ranks: tuple[int, ...]) -> Link:
        return Link(store, f"{token}/{'-'.join(map(str, ranks))}", ranks, timeout)

    mine = where.node_of(rank)
    # Members in global-rank order, the order the levels' blocks are laid out in.
    local = link(tuple(sorted(mine)))
    if where.even:
        position = mine.index(rank)
        across: Link | None = link(tuple(sorted(node[position] for node in where.nodes)))
    else:
        leaders = tuple(sorted(node[0] for node in where.nodes))
        across = link(leaders) if rank in leaders else None
    return Spanning(local, across, where.even, mine, where)
