"""FSDP2 training step on the CPU: gloo, the "accel" backend, and "accel" with FSDP2's
buffers in the shared pools (``accel.comm.fsdp.share_fsdp_buffers``).

    accel run --standalone --nproc-per-node 2 benchmarks/fsdp.py [--width 2048] [--layers 8]

Run under a launcher; rank 0 prints a markdown table. Three copies of the same MLP (each
layer ``fully_shard``-ed, then the root), one per way, train in the same job with their
steps interleaved (the machine is noisy): each round runs ``--steps`` steps of each.
Reported: the median step time per way, its time over gloo's and over plain "accel"'s
(medians of the rounds' ratios), and whether the pooled way's losses equal the plain
"accel" way's bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import accel.process_group  # noqa: E402, F401  (registers "accel")
from accel.comm.fsdp import share_fsdp_buffers  # noqa: E402

WAYS = ("gloo", "accel", "accel pooled")


def _model(width: int, layers: int, group: dist.ProcessGroup, pooled: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if pooled:
        share_fsdp_buffers(model, group)
    return model


def main() -> None:
    """Train the three ways in turn and print the table on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="steps per way per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    dist.init_process_group("accel")
    rank, world = dist.get_rank(), dist.get_world_size()
    accel_group = dist.group.WORLD
    assert accel_group is not None
    groups = {"gloo": dist.new_group(backend="gloo"), "accel": accel_group}
    models = {
        way: _model(args.width, args.layers, groups[way.split()[0]], way.endswith("pooled"))
        for way in WAYS
    }
    optimizers = {way: torch.optim.SGD(m.parameters(), lr=1e-3) for way, m in models.items()}
    generators = {way: torch.Generator().manual_seed(rank) for way in WAYS}
    samples: dict[str, list[float]] = {way: [] for way in WAYS}
    losses: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for way in WAYS:
            model, optimizer = models[way], optimizers[way]
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.steps):
                x = torch.randn(args.batch, args.width, generator=generators[way])
                loss = model(x).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses[way].append(loss.item())
            if round_:
                samples[way].append((time.perf_counter() - start) / args.steps)
    if rank == 0:
        params = sum(p.numel() for p in models["gloo"].parameters())  # DTensors: global sizes
        print(f"FSDP2, {world} ranks, {args.layers} x Linear({args.width}) = {params / 1e6:.0f}M "
              f"parameters, batch {args.batch}, torch {torch.__version__}, median of "
              f"{args.rounds} rounds of {args.steps} steps")  # fmt: skip
        print("| way | step (ms) | time / gloo's | time / accel's |")
        print("|---|---|---|---|")
        for way in WAYS:
            over = [
                statistics.median(t / b for t, b in zip(samples[way], samples[base], strict=True))
                for base in ("gloo", "accel")
            ]  # fmt: skip
            print(f"| {way} | {statistics.median(samples[way]) * 1e3:.1f} | {over[0]:.2f}x | "
                  f"{over[1]:.2f}x |")  # fmt: skip
        print(f"pooled losses == accel losses: {losses['accel pooled'] == losses['accel']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
