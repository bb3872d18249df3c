"""reduce_scatter_tensor latency: accel's shared-memory path vs gloo, fp32, 2+ ranks.

    accel run --standalone --nproc-per-node 2 benchmarks/reduce_scatter.py [--rounds 5]

Run under a launcher; rank 0 prints a markdown table. Sizes are the input's (world size x
the output). The two are timed in alternating rounds in the same job (the machine is
noisy) and the median per call is reported. DeepSpeed has no shared-memory
reduce_scatter to compare with.
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _collective_timing import seconds_per_call  # noqa: E402  # beside this script

from accel.comm import reduce_scatter_tensor_, uses_shared_memory  # noqa: E402

SIZES = [64 << 10, 1 << 20, 16 << 20, 64 << 20]


def main() -> None:
    """Time every size and print the table on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    assert uses_shared_memory(), "the shared-memory path is not available in this job"
    gloo_single: Callable[..., object] = dist.reduce_scatter_single  # pyright: ignore[reportUnknownMemberType]
    rows = []
    for size in SIZES:
        data = torch.randn(size // 4)
        out = torch.empty(data.numel() // world)
        methods: dict[str, Callable[[], object]] = {
            "accel shm": lambda o=out, d=data: reduce_scatter_tensor_(o, d),
            "gloo": lambda o=out, d=data: gloo_single(o, d),
        }
        iters = max(3, 20 * (1 << 20) // size)
        samples: dict[str, list[float]] = {name: [] for name in methods}
        for method in methods.values():
            method()  # warm up
        for _ in range(args.rounds):
            for name, method in methods.items():
                samples[name].append(seconds_per_call(method, iters))
        rows.append((size, {name: statistics.median(times) for name, times in samples.items()}))
    if dist.get_rank() == 0:
        print(f"{world} ranks, torch {torch.__version__}, float32, median of {args.rounds} rounds")
        print("| input size | accel shm (us) | gloo (us) | gloo / accel |")
        print("|---|---|---|---|")
        for size, medians in rows:
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            accel, gloo = medians["accel shm"], medians["gloo"]
            print(f"| {label} | {accel * 1e6:.0f} | {gloo * 1e6:.0f} | {gloo / accel:.1f}x |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
