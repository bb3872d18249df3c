"""DeepSpeed's inference_all_reduce on every rank of a torchrun job; prints a JSON summary.

With the integration active the op is accel's (torch.ops.deepspeed.inference_all_reduce_
defined by accel.integrations.deepspeed.comm_ops); every result is checked against the
exact sum, in every dtype DeepSpeed's op accepts and two it silently skips.

    torchrun --nproc-per-node 2 ds_inference_all_reduce.py [gloo|accel]

The argument is the torch.distributed backend DeepSpeed initialises (default gloo).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed


def main() -> None:
    import deepspeed
    import deepspeed.comm as dist

    backend = sys.argv[1] if len(sys.argv) > 1 else "gloo"
    if backend == "accel":
        import accel.process_group  # noqa: F401  # registers the backend

    # With "accel", the first collective is accel.comm's, straight on the accel group.
    deepspeed.init_distributed(dist_backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    checked = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32):
        for numel in (1, 1000, 70_000, 1 << 20):
            # Small integers: every partial sum is exact in every dtype, so == is the test.
            base = torch.arange(numel, dtype=torch.float64).remainder_(7)
            tensor = (base + rank).to(dtype)
            expected = (base * world + sum(range(world))).to(dtype)
            result = dist.inference_all_reduce(tensor)
            assert torch.equal(tensor, expected), (dtype, numel)
            assert result.data_ptr() == tensor.data_ptr()
            out = torch.ops.deepspeed.inference_all_reduce((base + rank).to(dtype))
            assert torch.equal(out, expected), (dtype, numel, "out of place")
            checked += 1
    from accel import comm
    from accel.integrations.deepspeed import comm_ops

    shared = comm.uses_shared_memory()  # collective: every rank asks
    if rank == 0:
        print(
            json.dumps(
                {
                    "checked": checked,
                    "world": world,
                    "owner": comm_ops.owner(),
                    "shared_memory": shared,
                    "backend": str(torch.distributed.get_backend()),
                    # deepspeed.comm calls accel without the dispatcher round trip.
                    "direct": getattr(
                        type(dist.comm.cdb).inference_all_reduce, "__accel_direct__", False
                    ),
                }
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
