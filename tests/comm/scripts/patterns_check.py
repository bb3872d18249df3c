"""One rank of a job that uses the "accel" backend the way real jobs do; writes
OUT/rank<N>.json with one entry per pattern (True: right; otherwise what went wrong).

    ACCEL_NODE_ID=a ... python patterns_check.py OUT      (RANK, WORLD_SIZE=4, MASTER_*)

Every value is a small integer, so every sum is exact in any order and every result is
compared with ``==`` against the same collective run on a flat gloo group (or against
the arithmetic). The patterns: destroy and init again (first); async work beside direct ``accel.comm`` calls and beside
the group's other collectives; sub-groups made before DDP, overlapping sub-groups, and
``use_local_synchronization`` groups made in a different order on each rank; two groups
with the same ranks used at once; non-contiguous inputs and outputs of every collective;
a seeded stress run that interleaves all of these; and async all-reduces on two new groups
issued in different orders on different ranks.
A failed pattern is recorded, not raised, so the others still run; the group's timeout
(20 s) turns a hang into a recorded error.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  (registers "accel")
from accel import comm

TIMEOUT = timedelta(seconds=20)


def _ints(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 8, shape, generator=generator).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


class Patterns:
    def __init__(self) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
        self.results: dict[str, Any] = {}

    def run(self, name: str, pattern: Callable[[], bool]) -> None:
        try:
            self.results[name] = bool(pattern())
        except Exception:  # recorded: the other ranks must not wait on this one
            self.results[name] = traceback.format_exc()[-1500:]

    def queued_then_direct(self) -> bool:
        """An async all_reduce queued on the group, then accel.comm on the same group."""
        ok = True
        total = sum(range(1, self.world + 1))
        for size in (1000, 70_000, 1 << 20):
            x1 = torch.full((size,), float(self.rank + 1))
            x2 = torch.full((size,), 100.0 * (self.rank + 1))
            work = dist.all_reduce(x1, async_op=True)
            comm.all_reduce_(x2)
            assert work is not None
            work.wait()
            ok &= bool((x1 == total).all() and (x2 == 100 * total).all())
        return ok

    def queued_then_each_collective(self) -> bool:
        """An async all_reduce queued, then each of the group's other collectives at once."""
        ok = True
        total = sum(range(1, self.world + 1))
        rank, world = self.rank, self.world
        for name in ("broadcast", "all_gather", "reduce_scatter", "barrier"):
            big = torch.full((1 << 20,), float(rank + 1))
            work = dist.all_reduce(big, async_op=True)
            if name == "broadcast":
                got = torch.full((4096,), float(rank))
                dist.broadcast(got, src=world - 1)
                ok &= bool((got == world - 1).all())
            elif name == "all_gather":
                out = torch.empty(world * 4096)
                dist.all_gather_into_tensor(out, torch.full((4096,), float(rank)))
                ok &= _same(out, torch.arange(world).float().repeat_interleave(4096))
            elif name == "reduce_scatter":
                out = torch.empty(4096)
                dist.reduce_scatter_tensor(out, torch.full((world * 4096,), float(rank)))
                ok &= bool((out == sum(range(world))).all())
            else:
                dist.barrier()
            assert work is not None
            work.wait()
            ok &= bool((big == total).all())
        return ok

    def subgroup_before_ddp(self) -> bool:
        """A sub-group of some ranks, made by every rank, then DDP on the whole world."""
        dist.new_group([0, 2], timeout=TIMEOUT)
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        model(_ints((2, 4), self.rank)).sum().backward()
        expected = torch.zeros(4)
        for rank in range(self.world):
            expected += _ints((2, 4), rank).sum(0)
        weight = model.module.weight.grad
        return weight is not None and torch.allclose(weight, (expected / self.world).expand(4, 4))

    def overlapping_subgroups(self) -> bool:
        """Two overlapping sub-groups ([0,1,3] and [1,2,3]), each used by its members."""
        first = dist.new_group([0, 1, 3], timeout=TIMEOUT)
        second = dist.new_group([1, 2, 3], timeout=TIMEOUT)
        ok = True
        for group, ranks in ((first, [0, 1, 3]), (second, [1, 2, 3])):
            if self.rank in ranks:
                x = torch.full((5000,), float(self.rank + 1))
                dist.all_reduce(x, group=group)
                ok &= bool((x == sum(r + 1 for r in ranks)).all())
        return ok

    def local_groups_in_rank_order(self) -> bool:
        """``use_local_synchronization`` groups, made in a different order on each rank
        (each rank has made as many groups as its peers when it makes one, as torch's
        naming needs)."""
        pairs = {0: ([0, 1], [0, 2]), 1: ([0, 1], [1, 3]), 2: ([2, 3], [0, 2]), 3: ([2, 3], [1, 3])}
        ok = True
        for ranks in pairs[self.rank]:
            group = dist.new_group(ranks, timeout=TIMEOUT, use_local_synchronization=True)
            x = torch.full((3000,), float(self.rank + 1))
            dist.all_reduce(x, group=group)
            ok &= bool((x == sum(r + 1 for r in ranks)).all())
        return ok

    def two_groups_same_ranks(self) -> bool:
        """Two groups with the same ranks: async work on one while the other collects."""
        ranks = list(range(self.world))
        first = dist.new_group(ranks, timeout=TIMEOUT)
        second = dist.new_group(ranks, timeout=TIMEOUT)
        ok, world, rank = True, self.world, self.rank
        total = sum(range(1, world + 1))
        for step in range(6):
            x = torch.full((1000 + 997 * step,), float(rank + 1))
            y = torch.full((5000,), 100.0 * (rank + 1))
            gathered = torch.empty(world * 3)
            work = dist.all_reduce(x, group=first, async_op=True)
            dist.all_gather_into_tensor(gathered, torch.full((3,), float(rank)), group=second)
            other = dist.all_reduce(y, group=second, async_op=True)
            direct = torch.ones(5)
            comm.all_reduce_(direct, group=first)
            scattered = torch.empty(2)
            dist.reduce_scatter_tensor(
                scattered, torch.arange(2.0 * world) * (rank + 1), group=first
            )
            assert work is not None
            assert other is not None
            work.wait()
            other.wait()
            ok &= bool((x == total).all() and (y == 100 * total).all() and (direct == world).all())
            ok &= _same(gathered, torch.arange(world).float().repeat_interleave(3))
            ok &= _same(scattered, torch.arange(2.0 * rank, 2.0 * rank + 2) * total)
        return ok

    def non_contiguous(self) -> bool:
        """Transposed and strided tensors in and out of every collective, direct and
        through the group: the logical result, as with contiguous tensors."""
        world, rank = self.world, self.rank
        ok = True
        for through_group in (False, True):
            rows = 3
            source = _ints((2, rows), rank)
            out = torch.empty(rows, 2 * world).t()  # dense, transposed
            if through_group:
                dist.all_gather_into_tensor(out, source)
            else:
                comm.all_gather_into_tensor_(out, source.t().contiguous().t())
            expected = torch.cat([_ints((2, rows), r) for r in range(world)])
            ok &= _same(out, expected)

            whole = _ints((2 * world, rows), 100 + rank)
            scattered = torch.empty(rows, 2).t()
            if through_group:
                dist.reduce_scatter_tensor(scattered, whole)
            else:
                comm.reduce_scatter_tensor_(scattered, whole.t().contiguous().t())
            summed = sum(_ints((2 * world, rows), 100 + r) for r in range(world))
            assert isinstance(summed, torch.Tensor)
            ok &= _same(scattered, summed[2 * rank : 2 * rank + 2])

            sent = torch.empty(rows, 4).t()
            sent.copy_(_ints((4, rows), 200 + rank))
            if through_group:
                dist.broadcast(sent, src=world - 1)
            else:
                comm.broadcast_(sent, world - 1)
            ok &= _same(sent, _ints((4, rows), 200 + world - 1))

            for size in (5, 70_001):
                strided = torch.empty(size, 2)[:, 0]  # every other element
                strided.copy_(_ints((size,), 300 + rank))
                comm.all_reduce_(strided)
                summed = sum(_ints((size,), 300 + r) for r in range(world))
                assert isinstance(summed, torch.Tensor)
                ok &= _same(strided, summed)
        return ok

    def async_first_use_in_either_order(self) -> bool:
        """Async all-reduces on two new groups, issued in one order by the first half of
        the ranks and in the other by the rest (the first touch of each group: neither
        set-up may wait for the other's), then a broadcast on each group, in the same
        order everywhere, which must take the route the set-up chose on every rank."""
        ranks = list(range(self.world))
        groups = [dist.new_group(ranks, timeout=TIMEOUT) for _ in range(2)]
        summed = [torch.full((5000,), float((self.rank + 1) * (i + 1))) for i in range(2)]
        order = [0, 1] if self.rank < self.world // 2 else [1, 0]
        works = {i: dist.all_reduce(summed[i], group=groups[i], async_op=True) for i in order}
        sent = [torch.full((3000,), float(self.rank)) for _ in groups]
        for i, group in enumerate(groups):
            dist.broadcast(sent[i], src=self.world - 1 - i, group=group)
        for work in works.values():
            assert work is not None
            work.wait()
        total = sum(range(1, self.world + 1))
        ok = all(bool((t == total * (i + 1)).all()) for i, t in enumerate(summed))
        return ok and all(bool((t == self.world - 1 - i).all()) for i, t in enumerate(sent))

    def stress(self) -> bool:
        """A seeded sequence (the same on every rank) of async and direct collectives on
        two groups and a local-synchronization one, each checked against gloo."""
        ranks = list(range(self.world))
        groups = [dist.group.WORLD, dist.new_group(ranks, timeout=TIMEOUT)]
        mirror = self.gloo
        draw = random.Random(1234)
        pending: list[tuple[Any, torch.Tensor, torch.Tensor]] = []
        ok = True
        for step in range(60):
            group = groups[draw.randrange(2)]
            kind = draw.choice(["async", "async", "sync", "direct", "gather", "scatter", "bcast"])
            dtype = draw.choice([torch.float32, torch.bfloat16, torch.float16])
            size = draw.choice([1, 7, 1000, 33_333, 300_000])
            mine = _ints((size,), step * 10 + self.rank, dtype)
            if kind in ("async", "sync", "direct"):
                expected = mine.clone()
                dist.all_reduce(expected, group=mirror)
                if kind == "async":
                    pending.append((dist.all_reduce(mine, group=group, async_op=True), mine,
                                    expected))  # fmt: skip
                    continue
                if kind == "sync":
                    dist.all_reduce(mine, group=group)
                else:
                    comm.all_reduce_(mine, group=group)
                ok &= _same(mine, expected)
            elif kind == "gather":
                out = torch.empty(self.world * size, dtype=dtype)
                expected = torch.empty_like(out)
                dist.all_gather_into_tensor(expected, mine, group=mirror)
                dist.all_gather_into_tensor(out, mine, group=group)
                ok &= _same(out, expected)
            elif kind == "scatter":
                whole = _ints((self.world * size,), step * 10 + self.rank, dtype)
                out, expected = torch.empty(size, dtype=dtype), torch.empty(size, dtype=dtype)
                dist.reduce_scatter_tensor(expected, whole, group=mirror)
                dist.reduce_scatter_tensor(out, whole, group=group)
                ok &= _same(out, expected)
            else:
                src = draw.randrange(self.world)
                expected = mine.clone()
                dist.broadcast(expected, src, group=mirror)
                dist.broadcast(mine, src, group=group)
                ok &= _same(mine, expected)
        for work, got, expected in pending:
            work.wait()
            ok &= _same(got, expected)
        return ok


def again_after_destroy() -> bool:
    """Collectives over both levels, destroy_process_group, then init_process_group again
    in the same processes, twice. (Run first: after DDP, torch itself keeps the old
    world's store alive past destroy.)

    Each new world meets on the first world's store under a prefix of its own: through
    env:// again, a rank could meet on the old world's store before rank 0 has closed it
    (when it serves the store) and read that world's keys, whatever the backend."""
    from torch.distributed import distributed_c10d as c10d

    ok = True
    rank, world = dist.get_rank(), dist.get_world_size()
    store = c10d._get_default_store()
    for again in range(2):
        x = torch.ones(4096)
        dist.all_reduce(x)
        ok &= bool((x == world).all())
        dist.barrier()
        dist.destroy_process_group()
        dist.init_process_group(
            "accel", timeout=TIMEOUT, store=dist.PrefixStore(f"again-{again}", store),
            rank=rank, world_size=world,
        )  # fmt: skip
        x = torch.full((4096,), float(rank + 1))
        dist.all_reduce(x)
        out = torch.empty(world * 2)
        dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
        ok &= bool((x == sum(range(1, world + 1))).all())
        ok &= _same(out, torch.arange(world).float().repeat_interleave(2))
    return ok


def run_patterns() -> dict[str, Any]:
    """Every pattern on the "accel" world this process has just initialized (before
    anything else ran on it: see :func:`again_after_destroy`), which is up again after."""
    results: dict[str, Any] = {}
    try:
        results["again_after_destroy"] = again_after_destroy()
    except Exception:
        results["again_after_destroy"] = traceback.format_exc()[-1500:]
    if not dist.is_initialized():  # the rest needs a world
        dist.init_process_group("accel", timeout=TIMEOUT)
    patterns = Patterns()
    for name in (
        "queued_then_direct", "queued_then_each_collective", "subgroup_before_ddp",
        "overlapping_subgroups", "local_groups_in_rank_order", "two_groups_same_ranks",
        "non_contiguous", "stress", "async_first_use_in_either_order",
    ):  # fmt: skip
        patterns.run(name, getattr(patterns, name))
    return {**results, **patterns.results}


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("accel", timeout=TIMEOUT)
    results = run_patterns()
    rank = int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **results}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
