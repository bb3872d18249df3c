"""Tell a job in the "slow mode" (docs/benchmarks.md) from a normal one, and show what it hits.

    for i in 1 2 3 4 5 6; do accel run --standalone --nproc-per-node 2 benchmarks/slow_jobs.py; done

Run under a launcher, 2 ranks; rank 0 prints one line per job: the median microseconds of a
1 MiB fp32 ``all_reduce_`` through the slots (each rank writes lines of its slot that the
other rank read in the call before last), of the same all-reduce between pooled tensors
(called back to back, each rank writes only lines it wrote itself last), and of a 1 MiB
``copy_`` by each rank alone (private memory, and inside this rank's pool), all in the same
job, then the slot path's time on five more groups (five new segments).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from accel.comm import all_reduce_, shared_empty  # noqa: E402

NUMEL = 1 << 18  # 1 MiB of fp32


def _median_us(call: Callable[[], object], calls: int = 150) -> float:
    dist.barrier()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    """Time the five calls and print rank 0's line."""
    dist.init_process_group("gloo")
    plain, source, target = torch.ones(NUMEL), torch.ones(NUMEL), torch.empty(NUMEL)
    pooled, pooled_target = shared_empty(NUMEL).fill_(1), shared_empty(NUMEL)
    all_reduce_(plain)
    figures = {
        "slots": _median_us(lambda: all_reduce_(plain)),
        "pooled": _median_us(lambda: all_reduce_(pooled)),
        "copy_": _median_us(lambda: target.copy_(source)),
        "copy_ in pool": _median_us(lambda: pooled_target.copy_(pooled)),
    }
    others = []
    for _ in range(5):
        group = dist.new_group(backend="gloo")
        all_reduce_(plain, group=group)
        others.append(_median_us(lambda g=group: all_reduce_(plain, group=g), calls=60))
    if dist.get_rank() == 0:
        line = ", ".join(f"{name} {us:.0f} us" for name, us in figures.items())
        print(f"1 MiB fp32: {line}; slots on 5 new groups: {[round(us) for us in others]} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
