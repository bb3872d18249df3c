"""Collectives over a group whose ranks sit on several nodes: shared memory inside each
node (accel.comm's own collectives on the node's link and its segment), gloo between nodes
(the link of the ranks at one local position, or of the node leaders). How the levels are
chosen and built: :mod:`accel.comm._spanning`.

Each function here is called by the public collective of the same name in
:mod:`accel.comm` once it has found the group's :class:`Spanning`, on every rank of the
group, with contiguous tensors; the node level is :mod:`accel.comm._local`'s collectives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from accel.comm import _local
from accel.comm._link import Link
from accel.comm._segment import contiguous_work, summable_codes, write_back
from accel.comm._spanning import Spanning


def named_ranks(
    spanning: Spanning, name: str, collective: Callable[..., None], *args: object
) -> None:
    """Run a two-level collective; a peer's death or timeout raises ``RuntimeError``, and
    ranks of one node that passed different tensors a ``ValueError`` (a mismatch), with
    the global ranks behind the node-local ranks the error names and the ranks of the
    link between nodes, after this rank left both levels.

    A rank that fails on one level because of a peer (one that exited, stayed silent or
    gave up) would otherwise leave the peers that wait for it on the other waiting out
    their timeout: its node's segment is stopped (node peers are told at once) and its
    links closed (a member waiting on one gets "Connection closed by peer" at once). The
    group is unusable from then on; later calls raise, naming this failure. An error
    every rank makes alike before any byte moves leaves the group usable."""
    try:
        collective(spanning, *args)
    except (ValueError, RuntimeError) as error:
        mismatch = isinstance(error, ValueError)
        if mismatch and "mismatch" not in str(error):
            raise  # refused alike on every rank before anything moved
        across = "" if spanning.across is None else (
            f"; the link between nodes joins global ranks {list(spanning.across.ranks)}"
        )  # fmt: skip
        message = (
            f"{error} [two-level {name}: node-local ranks 0..{spanning.local_size - 1} "
            f"are global ranks {list(spanning.node)}{across}]"
        )
        # Ranks of one node that passed different tensors have failed on the node's
        # segment, but the other nodes' ranks wait on the links for this node's share.
        if mismatch or _peer_failure(error):
            _leave(spanning, message)
        raise type(error)(message) from error


# What the errors of a peer that failed say (shared memory's and gloo's), as against an
# error every rank makes alike before any byte moves (gloo's "Invalid scalar type" for a
# dtype it does not sum), after which the group stays usable.
_PEER_FAILURES = (
    "exited", "imed out", "Connection closed", "Connection reset", "pair closure",
    "left the collective", "gave up on it", "did not reach", "failed earlier",
    "closed after an earlier failure",
)  # fmt: skip


def _peer_failure(error: Exception) -> bool:
    """Whether ``error`` says a peer exited, stayed silent or gave up (or this rank did)."""
    text = str(error)
    return any(marker in text for marker in _PEER_FAILURES)


def _leave(spanning: Spanning, reason: str) -> None:
    """Tell every peer this rank will not go on: stop the node's segment, close the links."""
    if spanning.local_shm is not None:
        spanning.local_shm.communicator.stop(reason)
    spanning.local.close(reason)
    if spanning.across is not None:
        spanning.across.close(reason)


def all_reduce(spanning: Spanning, tensor: torch.Tensor, timeout: float) -> None:
    """Sum ``tensor`` over the group, in place; every rank ends bit-identical.

    Even placement: reduce-scatter in the node, all-reduce of this rank's share with the
    ranks at its position on the other nodes, all-gather in the node. Uneven: the node
    sums, its leader all-reduces the whole tensor with the other leaders and broadcasts
    the result in the node."""
    local, size = spanning.local, spanning.local_size
    flat = contiguous_work(tensor).view(-1)
    if not spanning.even:
        _local.all_reduce(flat, spanning.local_shm, local, timeout)
        if spanning.across is not None:  # this rank is its node's leader
            spanning.across.all_reduce(flat, timeout=timeout)
        _local.broadcast(flat, local.member(spanning.node[0]), spanning.local_shm, local, timeout)
    else:
        share = math.ceil(flat.numel() / size)
        padded = flat
        if share * size != flat.numel():
            padded = flat.new_zeros(share * size)
            padded[: flat.numel()] = flat
        # When the segment sums it, this rank's share is its own block of the tensor: the
        # node's reduce-scatter sums into it and its all-gather leaves it in place (straight
        # between the node's tensors when they are in its pools, see shared_empty). Gloo
        # (no segment, or a dtype or device the segment does not take) gets a buffer of its
        # own: its collectives promise nothing about an output aliasing the input.
        here = local.rank()
        in_place = spanning.local_shm is not None and flat.is_cpu and flat.dtype in summable_codes()
        mine = padded[here * share : (here + 1) * share] if in_place else flat.new_empty(share)
        try:
            _local.reduce_scatter_tensor(mine, padded, spanning.local_shm, local, timeout)
        except ValueError as error:  # the node step's sizes are shares: say the caller's
            if "mismatch" not in str(error):
                raise
            raise ValueError(
                f"all_reduce mismatch: this rank has {flat.numel()} elements of "
                f"{tensor.dtype}, another rank of its node other ones (the node's step, "
                f"on shares of the tensor, said: {error})"
            ) from error
        assert spanning.across is not None  # every rank has a share to send, when even
        spanning.across.all_reduce(mine, timeout=timeout)
        _local.all_gather_into_tensor(padded, mine, spanning.local_shm, local, timeout)
        if padded is not flat:
            flat.copy_(padded[: flat.numel()])
    if flat.data_ptr() != tensor.data_ptr():
        write_back(tensor, flat.view_as(tensor))


def broadcast(spanning: Spanning, tensor: torch.Tensor, src: int, timeout: float | None) -> None:
    """``src``'s tensor to every rank: over gloo to one rank per node (the ranks at
    ``src``'s position, or the leaders), then inside each node's shared memory."""
    local, across = spanning.local, spanning.across
    source_node = spanning.where.node_of(src)
    if spanning.even:
        position = source_node.index(src)
        if spanning.node[position] == dist.get_rank():  # one of the ranks at that position
            assert across is not None  # every rank has one, when even
            across.broadcast(tensor, across.member(src), timeout=timeout)
        _local.broadcast(
            tensor, local.member(spanning.node[position]), spanning.local_shm, local, timeout
        )
        return
    if source_node == spanning.node:  # the whole node (its leader too) takes it from src
        _local.broadcast(tensor, local.member(src), spanning.local_shm, local, timeout)
    if across is not None:  # the leaders pass it from src's node's leader
        across.broadcast(tensor, across.member(source_node[0]), timeout=timeout)
    if source_node != spanning.node:
        _local.broadcast(tensor, local.member(spanning.node[0]), spanning.local_shm, local, timeout)


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's elements as one row of bytes (any dtype, bit for bit)."""
    return tensor.reshape(-1).view(torch.uint8)


def all_gather_into_tensor(
    spanning: Spanning, output: torch.Tensor, tensor: torch.Tensor, timeout: float | None
) -> None:
    """Every rank's ``tensor`` into ``output`` in group-rank order (even placement only).

    Gloo gathers the tensors of the ranks at this rank's position on every node (each
    rank sends its own tensor between nodes, once per other node) into this rank's part
    of ``output``; shared memory gathers those parts inside the node (in place: each rank
    keeps its own part where it is), and the rows are then moved to group-rank order in
    place. Nothing of ``output``'s size is allocated: fresh pages cost as much as the
    copies themselves (4 ranks on 2 cores, 64 MiB: ~80 ms of page faults against ~100 ms
    of collectives).
    """
    nodes, world = len(spanning.where.nodes), len(spanning.where.ranks)
    local = spanning.local
    rows = _bytes(output).view(world, -1)
    mine = _bytes(tensor)
    if shares_bytes(mine, rows):  # gloo writes into rows while it reads mine
        mine = mine.clone()
    here = local.rank()
    in_place = spanning.local_shm is not None  # gloo: no aliasing its input
    part = rows[here * nodes : (here + 1) * nodes].reshape(-1) if in_place else None
    across = part if part is not None else mine.new_empty(nodes * mine.numel())
    assert spanning.across is not None  # every rank has a position link, when even
    spanning.across.all_gather_single(across, mine, timeout=timeout)
    _local.all_gather_into_tensor(rows.view(-1), across, spanning.local_shm, local, timeout)
    _permute_rows(rows, spanning.block_order)


def shares_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous tensors' bytes overlap."""
    a_start, b_start = a.data_ptr(), b.data_ptr()
    return (
        a_start < b_start + b.numel() * b.element_size()
        and b_start < a_start + a.numel() * a.element_size()
    )


def _permute_rows(rows: torch.Tensor, order: tuple[int, ...]) -> None:
    """Move row ``k`` of ``rows`` to row ``order[k]``, in place, one cycle of the
    permutation at a time through a one-row buffer."""
    source = {destination: k for k, destination in enumerate(order)}
    settled = [destination == k for k, destination in enumerate(order)]
    spare: torch.Tensor | None = None
    for start in range(len(order)):
        if settled[start]:
            continue
        spare = rows[start].clone() if spare is None else spare.copy_(rows[start])
        destination = start
        while source[destination] != start:
            rows[destination].copy_(rows[source[destination]])
            settled[destination] = True
            destination = source[destination]
        rows[destination].copy_(spare)
        settled[destination] = True


def reduce_scatter_tensor(
    spanning: Spanning, output: torch.Tensor, input: torch.Tensor, timeout: float | None
) -> None:
    """Sum ``input`` over the group and keep this rank's block in ``output`` (even
    placement only).

    ``input``'s blocks are put in the order the two levels hand them out; shared memory
    sums the node's inputs and leaves each rank the blocks of the ranks at its position
    on every node; a ring over those ranks sums them between nodes, and each keeps its
    own block. Each rank sends one block per other node between nodes (gloo's
    ``reduce_scatter_tensor`` is an all-reduce of the whole input: twice that with two
    nodes, measured in docs/benchmarks.md)."""
    world, count = len(spanning.where.ranks), output.numel()
    blocks = input.reshape(world, count)
    # A copy (output may alias input), by rows: torch.cat copies whole rows at memcpy
    # speed whatever the dtype (index_select on bytes: ~6x slower).
    staged = torch.cat([blocks[group_rank] for group_rank in spanning.block_order])
    local, across = spanning.local, spanning.across
    assert across is not None  # every rank has a position link, when even
    partial = output.new_empty(across.size() * count)
    _local.reduce_scatter_tensor(partial, staged, spanning.local_shm, local, timeout)
    mine = _ring_reduce_scatter(partial.view(across.size(), count), across, timeout)
    output.copy_(mine.view_as(output))


def _ring_reduce_scatter(chunks: torch.Tensor, link: Link, timeout: float | None) -> torch.Tensor:
    """Sum row ``j`` of ``chunks`` over ``link`` (this rank is its member ``j``) and return
    it: in step s, this rank passes on its running sum of row j-1-s to the next member and
    adds the previous member's sum of row j-2-s."""
    rank, count = link.rank(), link.size()
    following, preceding = (rank + 1) % count, (rank - 1) % count
    incoming = chunks.new_empty(chunks.shape[1])
    for step in range(count - 1):
        sent, received = chunks[(rank - 1 - step) % count], chunks[(rank - 2 - step) % count]
        if incoming.numel():
            link.exchange(sent, following, incoming, preceding, timeout=timeout)
            received += incoming
    return chunks[rank]
