"""One rank of a job whose nodes are simulated with ACCEL_NODE_ID; writes OUT/rank<N>.json.

    ACCEL_NODE_ID=a ... python two_level_check.py OUT BACKEND

BACKEND ``gloo``: sums go through ``accel.comm.all_reduce_`` on a gloo group; ``accel``:
through ``dist.all_reduce`` on the "accel" process group. Each sum is checked against the
exact (float64) sum of every rank's values, gathered over a separate flat gloo group, and
every rank's result is gathered so the test can check they are identical. An
all-gather must deliver every rank's bytes exactly, a reduce-scatter the exact sum of
this rank's block within the summation bound, and a broadcast from every rank its bytes
exactly. DDP and FSDP2 models trained on the group under test are compared with the same
models trained on flat gloo. Calls that took the two levels are counted (the record's
``two_level``), so the test can tell them from a fallback to flat gloo.
"""

from __future__ import annotations

import gc
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  (registers "accel")
from accel import comm
from accel.comm._segment import spanning_of
from tests.support.two_level import count_two_level_calls

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Edge sizes (empty, one element, not a multiple of the ranks per node) and a few drawn at
# random with a fixed seed (the same on every rank); float32 also past one 16 MiB slot.
SIZES = [0, 1, 3, 1001, *random.Random(7).sample(range(2, 300_000), 4)]
LARGE = (16 << 20) // 4 + 5
# Gathers copy bytes: any dtype goes, bit for bit.
GATHER_DTYPES = (*DTYPES, torch.float64, torch.int32, torch.bool)

TWO_LEVEL = count_two_level_calls()


def _values(dtype: torch.dtype, size: int, seed: int) -> torch.Tensor:
    drawn = torch.randn(size, generator=torch.Generator().manual_seed(seed))
    return drawn > 0 if dtype == torch.bool else (drawn * 100).to(dtype)


def _sum(tensor: torch.Tensor, backend: str) -> None:
    if backend == "accel":
        dist.all_reduce(tensor)
    else:
        comm.all_reduce_(tensor)


def _gathers(backend: str, rank: int, world: int) -> bool:
    """Every rank's tensor (any dtype, sizes as the sums', 2-D output too) gathered exactly."""
    exact = True
    for dtype in GATHER_DTYPES:
        for size in SIZES:
            mine = _values(dtype, size, rank * 31 + size)
            expected = torch.cat([_values(dtype, size, r * 31 + size) for r in range(world)])
            output = torch.empty(world * size, dtype=dtype)
            if size == 1001:  # a 2-D output (rows of 7 x 11 x 13 elements)
                output = output.view(world * 7, 143)
                mine = mine.view(7, 143)
            if backend == "accel":
                dist.all_gather_into_tensor(output, mine)
            else:
                comm.all_gather_into_tensor_(output, mine)
            exact &= torch.equal(output.reshape(-1).view(torch.uint8), expected.view(torch.uint8))
    return exact


def _scatters(
    backend: str, rank: int, world: int, errors: dict[str, float], bounds: dict[str, float]
) -> None:
    """Reduce-scatter's block against the exact sum, within the summation bound."""
    for dtype in DTYPES:
        for size in SIZES:
            inputs = [
                torch.randn(world * size, generator=torch.Generator().manual_seed(r * 131 + size))
                .to(dtype) for r in range(world)
            ]  # fmt: skip
            everyone = torch.stack([t.double() for t in inputs])
            exact = everyone.sum(0).view(world, size)[rank]
            largest = everyone.abs().sum(0).view(world, size)[rank]
            output = torch.empty(size, dtype=dtype)
            if backend == "accel":
                dist.reduce_scatter_tensor(output, inputs[rank])
            else:
                comm.reduce_scatter_tensor_(output, inputs[rank])
            key = f"reduce_scatter/{str(dtype).removeprefix('torch.')}/{size}"
            eps = torch.finfo(dtype).eps
            errors[key] = float((output.double() - exact).abs().max()) if size else 0.0
            bounds[key] = float((largest * eps * world).max()) if size else 0.0


def _fsdp_losses(group: dist.ProcessGroup, rank: int) -> list[float]:
    from torch.distributed.device_mesh import DeviceMesh

    return _sharded_losses(DeviceMesh.from_group(group, "cpu"), rank)


def _hsdp_losses(rank: int, nodes: int) -> list[float]:
    """FSDP2 sharded inside each node, replicated across nodes (HSDP): the mesh's groups
    are "accel" groups of one node (shared memory) and of one rank per node (gloo)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(
        "cpu", (nodes, dist.get_world_size() // nodes), mesh_dim_names=("replicate", "shard")
    )
    return _sharded_losses(mesh, rank)


def _sharded_losses(mesh: Any, rank: int) -> list[float]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, rank)


def _ddp_losses(group: dist.ProcessGroup | None, rank: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)),
        process_group=group,
    )
    return _train(model, rank)


def _train(model: torch.nn.Module, rank: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(rank))
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def main() -> None:
    out, backend = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    flat = dist.new_group(backend="gloo")  # the reference: plain gloo over every rank
    errors: dict[str, float] = {}
    bounds: dict[str, float] = {}
    identical = True
    for dtype in DTYPES:
        for size in [*SIZES, LARGE] if dtype == torch.float32 else SIZES:
            mine = torch.randn(size, generator=torch.Generator().manual_seed(rank * 7919 + size))
            mine = mine.to(dtype)
            everyone = [torch.empty(size, dtype=torch.float32) for _ in range(world)]
            dist.all_gather(everyone, mine.float(), group=flat)
            exact = torch.stack(everyone).double().sum(0) if size else torch.zeros(0).double()
            _sum(mine, backend)
            # Each addition rounds once in the dtype at worst: world roundings of the
            # largest partial sum bound the error.
            largest = torch.stack(everyone).double().abs().sum(0) if size else exact
            eps = torch.finfo(dtype).eps
            bound = float((largest * eps * world).max()) if size else 0.0
            key = f"{str(dtype).removeprefix('torch.')}/{size}"
            errors[key] = float((mine.double() - exact).abs().max()) if size else 0.0
            bounds[key] = bound
            results = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(results, mine, group=flat)
            # Bit for bit (NaN-safe): the bytes of every rank's result.
            first = results[0].view(torch.uint8)
            identical &= all(torch.equal(r.view(torch.uint8), first) for r in results)
    # Broadcast from every rank, bit for bit, through the levels under test.
    broadcast_ok = True
    for src in range(world):
        for dtype in DTYPES:
            expected = torch.randn(1003, generator=torch.Generator().manual_seed(src)).to(dtype)
            mine = expected.clone() if rank == src else torch.zeros(1003, dtype=dtype)
            if backend == "accel":
                dist.broadcast(mine, src)
            else:
                comm.broadcast_(mine, src)
            broadcast_ok &= torch.equal(mine.view(torch.uint8), expected.view(torch.uint8))
    gathers_ok = _gathers(backend, rank, world)
    _scatters(backend, rank, world, errors, bounds)
    # A second group of every rank, made and destroyed twice: its levels reuse the first
    # group's sub-groups (same ranks; torch cannot make those twice).
    second_group_ok = True
    for _ in range(2):
        again = dist.new_group(backend=backend)
        total = torch.full((5,), float(rank))
        if backend == "accel":
            dist.all_reduce(total, group=again)
        else:
            comm.all_reduce_(total, group=again)
        second_group_ok &= bool(total.eq(world * (world - 1) / 2).all())
        second_group_ok &= (spanning_of(again) is None) == (spanning_of(None) is None)
        dist.destroy_process_group(again)
    spanning = spanning_of(None)
    world_group = dist.group.WORLD
    assert world_group is not None
    record = {
        "rank": rank,
        "levels": None if spanning is None else {"even": spanning.even, "local": spanning.local_size},
        "errors": errors,
        "bounds": bounds,
        "identical": identical,
        "broadcast_ok": broadcast_ok,
        "gathers_ok": gathers_ok,
        "second_group_ok": second_group_ok,
        "ddp": _ddp_losses(None, rank),
        "ddp_gloo": _ddp_losses(flat, rank),
        # FSDP2 calls the process group itself: only the "accel" backend routes it.
        "fsdp": _fsdp_losses(world_group, rank) if backend == "accel" else None,
        "fsdp_gloo": _fsdp_losses(flat, rank) if backend == "accel" else None,
        # HSDP where the nodes hold their ranks in order (its mesh assumes it).
        "hsdp": _hsdp_losses(rank, len(spanning.where.nodes))
        if backend == "accel" and spanning is not None and spanning.where.ranks == tuple(
            r for node in spanning.where.nodes for r in node
        ) and spanning.even else None,
        "two_level": dict(TWO_LEVEL),
    }  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # The destroyed world group is still held in a reference cycle when main() returns
    # (gc.get_objects() finds it): collect it now, not at interpreter teardown, where its
    # gloo threads dropping tensors can abort the process (torch's exit race:
    # tests/integrations/deepspeed/scripts/exit_abort_repro.py).
    gc.collect()
