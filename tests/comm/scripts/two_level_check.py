"""One rank of a job whose nodes are simulated with ACCEL_NODE_ID; writes OUT/rank<N>.json.

    ACCEL_NODE_ID=a ... python two_level_check.py OUT BACKEND

BACKEND ``gloo``: sums go through ``accel.comm.all_reduce_`` on a gloo group; ``accel``:
through ``dist.all_reduce`` on the "accel" process group. Each sum is checked against the
exact (float64) sum of every rank's values, gathered over a separate flat gloo group, and
every rank's result is gathered so the test can check they are identical. A DDP model
trained on the group under test is compared with the same model trained on flat gloo, and
a broadcast from every rank must deliver its bytes exactly.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  (registers "accel")
from accel import comm
from accel.comm._segment import spanning_of

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Edge sizes (empty, one element, not a multiple of the ranks per node) and a few drawn at
# random with a fixed seed (the same on every rank); float32 also past one 16 MiB slot.
SIZES = [0, 1, 3, 1001, *random.Random(7).sample(range(2, 300_000), 4)]
LARGE = (16 << 20) // 4 + 5


def _sum(tensor: torch.Tensor, backend: str) -> None:
    if backend == "accel":
        dist.all_reduce(tensor)
    else:
        comm.all_reduce_(tensor)


def _ddp_losses(group: dist.ProcessGroup | None, rank: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)),
        process_group=group,
    )
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
    spanning = spanning_of(None)
    record = {
        "rank": rank,
        "levels": None if spanning is None else {"even": spanning.even, "local": spanning.local_size},
        "errors": errors,
        "bounds": bounds,
        "identical": identical,
        "broadcast_ok": broadcast_ok,
        "ddp": _ddp_losses(None, rank),
        "ddp_gloo": _ddp_losses(flat, rank),
    }  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
