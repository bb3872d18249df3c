"""One rank of a plain gloo job: the ring reduce-scatter that sums between nodes, checked
against the exact sum for each dtype and a few row lengths; writes OUT/rank<N>.json.

    python two_level_ring.py OUT      (RANK, WORLD_SIZE, MASTER_ADDR/PORT set)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from accel.comm._link import Link
from accel.comm._torch_dist import group_store
from accel.comm._two_level import _ring_reduce_scatter  # pyright: ignore[reportPrivateUsage]


def _rows(rank: int, world: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    seed = rank * 1009 + count
    return torch.randn(world, count, generator=torch.Generator().manual_seed(seed)).to(dtype)


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    link = Link(group_store(None), "ring", tuple(range(world)), 60.0)
    worst: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for count in (0, 1, 7, 4099):
            mine = _rows(rank, world, count, dtype)
            summed = _ring_reduce_scatter(mine.clone(), link, None)
            everyone = torch.stack([_rows(r, world, count, dtype).double() for r in range(world)])
            exact, largest = everyone.sum(0)[rank], everyone.abs().sum(0)[rank]
            # One rounding in the dtype per addition at worst.
            bound = largest * torch.finfo(dtype).eps * world
            excess = (summed.double() - exact).abs() - bound
            worst[f"{dtype}/{count}"] = float(excess.max()) if count else 0.0
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "excess": worst}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
