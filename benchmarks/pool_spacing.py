"""The pooled all-reduce on tensors a power of two apart, and a little more than that.

    accel run --standalone --nproc-per-node 2 benchmarks/pool_spacing.py

Rank r's pool in a group's segment starts further than ``r * pool size`` from rank 0's
(csrc/shm_comm/shm_comm.cpp, ``pool``). This places two tensors in the pools so that rank
0's is exactly ``ACCEL_SHM_POOL_BYTES`` (default 1 GiB) before rank 1's, and two more at the
pools' usual spacing, and times ``all_reduce_`` on each pair in alternating rounds. Rank 0
prints the median per call of each.
"""

from __future__ import annotations

import functools
import statistics
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch.distributed as dist  # noqa: E402
from _collective_timing import seconds_per_call  # noqa: E402  # beside this script

from accel.comm import all_reduce_, shared_empty, uses_shared_memory  # noqa: E402

# Rank 1's pool starts one page and 17 cache lines after rank 0's pool plus the pool size.
_EXTRA = 4096 + 17 * 64


def _time_both(size: int, rank: int) -> dict[str, float]:
    """Median seconds per all-reduce of ``size`` bytes of fp32 at each spacing."""
    numel = size // 4
    usual = shared_empty(numel).fill_(1)
    # Rank 0 skips _EXTRA bytes (rank 1 one cache line): its next tensor is then the pool
    # size, exactly, before rank 1's.
    skipped = shared_empty((_EXTRA if rank == 0 else 64) // 4)
    aligned = shared_empty(numel).fill_(1)
    calls = {
        "pool size + 5184 bytes apart": functools.partial(all_reduce_, usual),
        "pool size apart": functools.partial(all_reduce_, aligned),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(7):
        for name, call in calls.items():
            times[name].append(seconds_per_call(call, 20))
    del skipped  # held until here: the pool's offsets are what the names say
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    """Time both spacings at 1 and 4 MiB; rank 0 prints."""
    dist.init_process_group("gloo")
    assert dist.get_world_size() == 2, "run it with two ranks"
    assert uses_shared_memory(), "the shared-memory path is not available in this job"
    rank = dist.get_rank()
    for size in (1 << 20, 4 << 20):
        medians = _time_both(size, rank)
        if rank == 0:
            shown = ", ".join(f"{name}: {t * 1e6:.0f} us" for name, t in medians.items())
            print(f"{size >> 20} MiB fp32: {shown}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
