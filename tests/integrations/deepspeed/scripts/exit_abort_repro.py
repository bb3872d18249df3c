"""The exit-time abort of 2-rank gloo jobs, and the check that accel no longer triggers it.

Symptom: "terminate called without an active exception" (SIGABRT) at interpreter
teardown, after the script's work is done. Cause (core dump, gdb ``thread apply all bt``):
gloo's worker thread destroys a finished ``AsyncAllreduceWork`` after ``wait()`` returned;
dropping the work's tensors hands the last C++ reference back to the Python tensor, which
needs the GIL; the interpreter is finalising, so Python 3.11 ends the thread with
``pthread_exit`` inside a ``noexcept`` destructor, and libstdc++ calls ``std::terminate``.
It is torch's race, not DeepSpeed's or accel's: any script whose last collective runs on
gloo can hit it. accel's synchronous torch.distributed calls now return only once gloo has
let go (``accel/comm/_release.py``).

Run each way 10 times (commands from the repository root):

    # torch alone, the last act a gloo all_reduce: aborts in 6 and 7 of 10 (torch 2.13)
    torchrun --standalone --nproc-per-node=2 tests/integrations/deepspeed/scripts/exit_abort_repro.py torch
    # DeepSpeed with accel's integration (float64 goes to gloo through accel.comm):
    # 3 of 6 before accel/comm/_release.py, 0 of 10 after
    ACCEL_DEEPSPEED=1 TORCH_EXTENSIONS_DIR=$(mktemp -d) \
        torchrun --standalone --nproc-per-node=2 tests/integrations/deepspeed/scripts/exit_abort_repro.py
    # native DeepSpeed (its op skips float64, leaving it unreduced: no gloo call, no abort)
    DS_ACCELERATOR=cpu LOCAL_SIZE=2 TORCH_EXTENSIONS_DIR=/tmp/tex \
        torchrun --standalone --nproc-per-node=2 tests/integrations/deepspeed/scripts/exit_abort_repro.py

Not run by the test suite (each run is a fresh 2-rank job and the abort is a race);
tests/comm/test_collectives.py checks the property that prevents it on every run.
"""

import sys

import torch

if sys.argv[1:] == ["torch"]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1 << 20, dtype=torch.float64)
    dist.all_reduce(tensor)  # the last act: the race is with interpreter teardown
else:
    import deepspeed
    import deepspeed.comm as dist

    deepspeed.init_distributed(dist_backend="gloo")
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for numel in (1, 1000, 70_000, 1 << 20):
            tensor = torch.ones(numel, dtype=dtype)
            dist.inference_all_reduce(tensor)
if dist.get_rank() == 0:
    print("done", flush=True)
