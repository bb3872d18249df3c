"""Who a collective talks to: a torch.distributed group, or a link of accel's own.

accel's collectives run over :class:`Members`: the ranks of a group, their order, and the
gloo calls accel needs from them (to set up a shared segment, and to fall back when the
segment cannot be used). Two kinds satisfy it:

- :class:`TorchGroup`: a group the user made (``init_process_group``, ``new_group``);
  calls go through torch.distributed.
- :class:`Link`: a gloo context accel makes for one level of a group that spans nodes (the
  ranks of one node, or the ranks at one position on every node). A link is not a
  torch.distributed group: torch names its groups from per-process counters (a
  ``use_local_synchronization`` group's name hashes the calling rank's count of groups,
  so members that belong to different numbers of groups disagree), and one name per set of
  ranks would make two groups with the same ranks share their traffic. A link's name is
  derived from its parent group's setup (a token drawn by the parent's rank 0 and
  gathered by every rank) and its ranks, so every member derives the same name, and no
  two parents, and no group made again after a destroy, share one. A link lives as long
  as its parent group.
"""

from __future__ import annotations

import weakref
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

from accel.comm import _torch_dist as tdist
from accel.comm._release import released, run_released

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store  # pyright: ignore[reportMissingModuleSource]


class Members(Protocol):
    """The ranks of a group as accel's collectives use them: who they are, and the
    synchronous gloo collectives accel falls back to. Each collective takes ``timeout``,
    the seconds to wait for a silent member (``None``: the group's own timeout) where the
    members can honour one per call (a :class:`Link`; torch.distributed's calls take none).
    """

    def size(self) -> int:
        """How many ranks."""
        ...

    def rank(self) -> int:
        """This process's rank among them (0 .. size - 1)."""
        ...

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, *, timeout: float | None = None
    ) -> None:
        """Reduce ``tensor`` in place over the members."""
        ...

    def all_gather(
        self, outputs: list[torch.Tensor], tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """Every member's ``tensor`` into ``outputs``, in member order."""
        ...

    def all_gather_single(
        self, output: torch.Tensor, tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """Every member's ``tensor`` concatenated into ``output``, in member order."""
        ...

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """The sum of every member's ``input``; this member's block into ``output``."""
        ...

    def broadcast(self, tensor: torch.Tensor, root: int, *, timeout: float | None = None) -> None:
        """Member ``root``'s ``tensor`` to every member, in place."""
        ...


class TorchGroup:
    """A torch.distributed group (``None``: the default group) as :class:`Members`."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        # Weakly: a segment's members must not keep its group (and so the segment) alive.
        self._group = weakref.ref(group) if group is not None else None

    @property
    def group(self) -> dist.ProcessGroup | None:
        """The group (None: the default group)."""
        if self._group is None:
            return None
        group = self._group()
        if group is None:
            raise RuntimeError("accel.comm: the process group was destroyed")
        return group

    def size(self) -> int:
        """How many ranks the group has."""
        return dist.get_world_size(self.group)

    def rank(self) -> int:
        """This process's rank in the group."""
        return dist.get_rank(self.group)

    # torch.distributed's collectives take no timeout per call: ``timeout`` is not used,
    # and the group's own applies.

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, *, timeout: float | None = None
    ) -> None:
        """``dist.all_reduce`` on the group."""
        run_released(tdist.all_reduce, [tensor], self.group, tensor, op=op)

    def all_gather(
        self, outputs: list[torch.Tensor], tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """``dist.all_gather`` on the group."""
        run_released(tdist.all_gather, [tensor, *outputs], self.group, outputs, tensor)

    def all_gather_single(
        self, output: torch.Tensor, tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """``dist.all_gather_into_tensor`` on the group."""
        run_released(tdist.all_gather_single, [output, tensor], self.group, output, tensor)

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """``dist.reduce_scatter_tensor`` (``SUM``) on the group."""
        run_released(tdist.reduce_scatter_single, [output, input], self.group, output, input)

    def broadcast(self, tensor: torch.Tensor, root: int, *, timeout: float | None = None) -> None:
        """``dist.broadcast`` from the group's rank ``root``."""
        src = dist.get_global_rank(self.group, root) if self.group is not None else root
        run_released(tdist.broadcast, [tensor], self.group, tensor, src=src)


class Link:
    """A gloo context of its own among ``ranks`` (global ranks, in member order), made on
    the parent group's store under ``name``. Collective: every member constructs it with
    the same arguments (gloo connects the members here, within ``timeout`` seconds)."""

    def __init__(self, store: Store, name: str, ranks: tuple[int, ...], timeout: float) -> None:
        self.ranks = ranks
        self._rank = ranks.index(dist.get_rank())
        prefixed = tdist.prefix_store(f"accel/link/{name}/", store)
        # Typed as Any: torch's stubs omit most of ProcessGroupGloo's methods; the two-level
        # tests run every call below against flat gloo's results.
        self._gloo: Any = dist.ProcessGroupGloo(
            prefixed, self._rank, len(ranks), timedelta(seconds=timeout)
        )
        self._closed = ""  # why, once closed

    @property
    def gloo(self) -> Any:
        """The link's gloo context; ``RuntimeError`` once :meth:`close` dropped it."""
        if self._gloo is None:
            raise RuntimeError(
                f"this group's link between ranks {list(self.ranks)} was closed after an "
                f"earlier failure ({self._closed}); create a new process group"
            )
        return self._gloo

    def close(self, reason: str) -> None:
        """Drop the gloo context after a failure: its connections close, so a member
        waiting for this rank in a call on the link raises at once ("Connection closed by
        peer") instead of waiting out the timeout; later calls here raise naming
        ``reason`` (the first one given)."""
        if self._gloo is not None:
            self._gloo, self._closed = None, reason

    def size(self) -> int:
        """How many ranks the link joins."""
        return len(self.ranks)

    def rank(self) -> int:
        """This process's rank on the link."""
        return self._rank

    def member(self, global_rank: int) -> int:
        """The link rank of ``global_rank``."""
        return self.ranks.index(global_rank)

    # gloo honours each call's ``timeout`` (None: the link's own, its parent group's), in
    # its options.

    def _run(
        self, tensors: list[torch.Tensor], call: str, options: Any, timeout: float | None,
        *args: object,
    ) -> None:  # fmt: skip
        if timeout is not None:
            options.timeout = timedelta(seconds=timeout)
        with released(tensors):
            getattr(self.gloo, call)(*args, options).wait()

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, *, timeout: float | None = None
    ) -> None:
        """Reduce ``tensor`` in place over the link."""
        options = dist.AllreduceOptions()
        options.reduceOp = op
        self._run([tensor], "allreduce", options, timeout, [tensor])

    def all_gather(
        self, outputs: list[torch.Tensor], tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """Every member's ``tensor`` into ``outputs``."""
        options = tdist.options.AllgatherOptions()
        self._run([tensor, *outputs], "allgather", options, timeout, [outputs], [tensor])

    def all_gather_single(
        self, output: torch.Tensor, tensor: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """Every member's ``tensor`` concatenated into ``output``."""
        options = tdist.options.AllgatherOptions()
        self._run([output, tensor], "_allgather_base", options, timeout, output, tensor)

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, *, timeout: float | None = None
    ) -> None:
        """The sum of every member's ``input``; this member's block into ``output``."""
        options = dist.ReduceScatterOptions()
        self._run([output, input], "_reduce_scatter_base", options, timeout, output, input)

    def broadcast(self, tensor: torch.Tensor, root: int, *, timeout: float | None = None) -> None:
        """Member ``root``'s ``tensor`` to every member."""
        options = dist.BroadcastOptions()
        options.rootRank = root
        self._run([tensor], "broadcast", options, timeout, [tensor])

    def exchange(
        self, send: torch.Tensor, to: int, receive: torch.Tensor, source: int,
        *, timeout: float | None = None,
    ) -> None:  # fmt: skip
        """Send ``send`` to member ``to`` while receiving ``receive`` from ``source``."""
        wait = () if timeout is None else (timedelta(seconds=timeout),)
        with released([send, receive]):
            sending = self.gloo.send([send], to, 0)
            try:
                self.gloo.recv([receive], source, 0).wait(*wait)
                sending.wait(*wait)
            finally:
                # The work holds ``send`` (and the gloo context) for as long as it lives:
                # kept past here, it would make ``released`` wait its whole limit (1 s) on
                # every exchange, and, held by a raised error's traceback, keep the
                # connections :meth:`close` drops open.
                sending = None
