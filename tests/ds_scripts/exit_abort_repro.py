"""Repro of the open exit-time abort (issue 9/12 notes): run it 8 times each way.

    DS_ACCELERATOR=cpu LOCAL_SIZE=2 TORCH_EXTENSIONS_DIR=/tmp/tex \
        torchrun --standalone --nproc-per-node=2 tests/ds_scripts/exit_abort_repro.py
    ACCEL_DEEPSPEED=1 TORCH_EXTENSIONS_DIR=$(mktemp -d) \
        torchrun --standalone --nproc-per-node=2 tests/ds_scripts/exit_abort_repro.py

Measured on the CI machine: native DeepSpeed 0 aborts in 8 runs; with accel's integration
2 in 8 ("terminate called without an active exception" at interpreter teardown, after
"done" is printed). Not run by the test suite.
"""

import deepspeed
import deepspeed.comm as dist
import torch

deepspeed.init_distributed(dist_backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
for dtype in (torch.float32, torch.bfloat16, torch.float64):
    for numel in (1, 1000, 70_000, 1 << 20):
        t = torch.ones(numel, dtype=dtype)
        dist.inference_all_reduce(t)
if rank == 0:
    print("done", flush=True)
