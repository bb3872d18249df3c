"""The spread of accel's all-reduce times: percentiles per call, not only the median.

    cd /tmp && PYTHONPATH=<tree> accel run --standalone --nproc-per-node 2 \\
        <repo>/benchmarks/allreduce_percentiles.py [--calls 300]

Rank 0 prints, per dtype and size, p10/p50/p90/p99/max and the mean of single calls in
microseconds. A mean far above the median means a few slow calls, which a median-only
table hides. To compare two builds, run it alternately with PYTHONPATH pointing at each
tree (built in place: ``python setup.py build_ext --inplace``); the first line names the
native module that was loaded.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import accel.ops._shm_comm as native
from accel.comm import all_reduce_

CASES = [
    (torch.float32, 2 << 20),
    (torch.float32, 4 << 20),
    (torch.bfloat16, 4 << 20),
    (torch.float32, 8 << 20),
    (torch.float32, 16 << 20),
]


def main() -> None:
    """Time single calls of each case and print the percentiles on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls up to 4 MiB")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        print(f"{dist.get_world_size()} ranks, native module {native.__file__}", flush=True)
    for dtype, size in CASES:
        tensor = torch.ones(size // dtype.itemsize, dtype=dtype)
        for _ in range(5):
            all_reduce_(tensor)
        dist.barrier()
        times = []
        for _ in range(args.calls if size <= 4 << 20 else max(3, args.calls // 3)):
            start = time.perf_counter()
            all_reduce_(tensor)
            times.append((time.perf_counter() - start) * 1e6)
        times.sort()

        def at(fraction: float, times: list[float] = times) -> float:
            return times[int(fraction * (len(times) - 1))]

        if rank == 0:
            print(
                f"{str(dtype).removeprefix('torch.'):9s} {size >> 20:3d} MiB  "
                f"p10 {at(0.1):7.0f} p50 {at(0.5):7.0f} p90 {at(0.9):7.0f} "
                f"p99 {at(0.99):7.0f} max {times[-1]:7.0f} mean {statistics.fmean(times):7.0f}",
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
