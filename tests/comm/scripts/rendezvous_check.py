"""One rank of a job started by several `accel run` launchers that meet through a c10d
rendezvous (each launcher a simulated node: ACCEL_NODE_ID); writes OUT/rank<N>.json with
what the rank was given (ranks, cores, threads) and whether a sum took the two levels.

    ACCEL_NODE_ID=a accel run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        --nproc-per-node 2 --bind-cores-to-rank rendezvous_check.py OUT
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  (registers "accel")
from accel.comm._nodes import node_identity
from accel.comm._segment import spanning_of


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("accel")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.full((1000,), float(rank))
    dist.all_reduce(total)
    spanning = spanning_of(None)
    record = {
        "rank": rank,
        "world": world,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "node": node_identity(),
        "cores": sorted(os.sched_getaffinity(0)),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "sum_ok": bool(total.eq(world * (world - 1) / 2).all()),
        "local_size": None if spanning is None else spanning.local_size,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
