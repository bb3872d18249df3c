"""reduce_scatter / all_gather latency: accel's shared-memory paths vs gloo, fp32, 2+ ranks.

    accel run --standalone --nproc-per-node 2 benchmarks/reduce_scatter.py [--rounds 5]
    accel run --standalone --nproc-per-node 2 benchmarks/reduce_scatter.py --op all_gather

Run under a launcher; rank 0 prints a markdown table. Sizes are the larger tensor's: the
reduce-scatter's input, the all-gather's output (world size x the other one). The methods
are timed in alternating rounds in the same job (the machine is noisy); the median per call
is reported, and a ratio column is the median of the rounds' ratios.

"accel shm" is ``accel.comm``'s call on ordinary tensors (copied through the segment's
slots); "accel pooled" the same call with the input made by ``accel.comm.shared_empty``,
placed as FSDP2 places its buffers with ``accel.comm.fsdp.share_fsdp_buffers``: the
reduce-scatter's input in the pool, the all-gather's input as this rank's block of a pooled
output. Each call first writes its input (``copy_`` from another buffer, as FSDP2's copy-in
does) and is reported less the time of that write alone, timed in the same rounds.

The bound: ``copy_`` of the larger tensor's bytes by every rank at once, timed in the same
rounds. An all-gather writes that many bytes and a reduce-scatter reads that many, so
"copy_ / accel pooled" (copy time over collective time) is the fraction of the copy rate
the pooled path reaches. DeepSpeed has no shared-memory reduce-scatter or all-gather to
compare with.
"""

from __future__ import annotations

import argparse
import functools
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _collective_timing import after_writing, interleaved, label, microseconds  # noqa: E402

from accel.comm import (  # noqa: E402
    all_gather_into_tensor_,
    reduce_scatter_tensor_,
    shared_empty,
    uses_shared_memory,
)
from accel.ops import isa  # noqa: E402

Calls = dict[str, Callable[[], object]]

SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _written_first(
    collective: Callable[[torch.Tensor, torch.Tensor], object],
    gloo: Callable[..., object],
    plain: tuple[torch.Tensor, torch.Tensor],
    pooled: tuple[torch.Tensor, torch.Tensor],
) -> Calls:
    """accel's ``collective`` on the (output, input) pairs ``plain`` and ``pooled``, and
    gloo's on ``plain``, each call writing its input first."""
    source = torch.randn(plain[1].numel())
    return {
        "accel shm": after_writing(plain[1], source, functools.partial(collective, *plain)),
        "accel pooled": after_writing(pooled[1], source, functools.partial(collective, *pooled)),
        "gloo": after_writing(plain[1], source, functools.partial(gloo, *plain)),
    }


def _reduce_scatter_calls(size: int, world: int) -> tuple[Calls, torch.Tensor]:
    """The calls of one size, and the input the "write" call fills."""
    plain = torch.empty(size // 4)
    out = torch.empty(plain.numel() // world)
    gloo: Callable[..., object] = dist.reduce_scatter_single  # pyright: ignore[reportUnknownMemberType]
    pooled = shared_empty(plain.numel())
    return _written_first(reduce_scatter_tensor_, gloo, (out, plain), (out, pooled)), plain


def _all_gather_calls(size: int, world: int) -> tuple[Calls, torch.Tensor]:
    """As ``_reduce_scatter_calls``; the pooled input is this rank's block of the output."""
    part = size // 4 // world
    rank = dist.get_rank()
    plain, out = torch.empty(part), torch.empty(part * world)
    pooled_out = shared_empty(part * world)
    pooled = pooled_out[rank * part : (rank + 1) * part]
    gloo: Callable[..., object] = dist.all_gather_into_tensor
    return _written_first(all_gather_into_tensor_, gloo, (out, plain), (pooled_out, pooled)), plain


def main() -> None:
    """Time every size and print the table on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=["reduce_scatter", "all_gather"], default="reduce_scatter")
    parser.add_argument("--iters", type=int, default=20, help="calls per timed round (1 MiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-gloo", action="store_true", help="leave gloo out (slow)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    assert uses_shared_memory(), "the shared-memory path is not available in this job"
    make = _reduce_scatter_calls if args.op == "reduce_scatter" else _all_gather_calls
    rows = []
    for size in SIZES:
        calls, written = make(size, world)
        if args.skip_gloo:
            del calls["gloo"]
        timed = list(calls)
        calls["write"] = functools.partial(written.copy_, torch.randn(written.numel()))
        larger = torch.empty(size // 4)
        calls["copy_"] = functools.partial(torch.empty_like(larger).copy_, larger)
        pair = ("copy_", "accel pooled")
        rows.append((size, *interleaved(calls, size, args, "accel shm", timed, pair)))
    if dist.get_rank() == 0:
        names = [n for n in ("accel shm", "accel pooled", "gloo", "copy_") if n in rows[0][1]]
        peers = [n for n in names if n not in ("accel shm", "copy_")]
        print(
            f"{args.op}, {world} ranks, torch {torch.__version__}, float32, kernels: "
            f"{isa.describe()}, median of {args.rounds} rounds (ratios: median of the rounds' "
            "ratios), each call after writing its input, less that write"
        )
        columns = " | ".join(f"{n} (us)" for n in names)
        ratios = " | ".join(f"{n} / accel shm" for n in peers)
        print(f"| size | {columns} | {ratios} | copy_ / accel pooled |")
        print("|---|" + "---|" * (len(names) + len(peers) + 1))
        for size, medians, paired in rows:
            times = " | ".join(microseconds(medians[n]) for n in names)
            speedups = " | ".join(f"{paired[n]:.2f}x" for n in peers)
            bound = paired["copy_ / accel pooled"]
            print(f"| {label(size)} | {times} | {speedups} | {bound:.2f}x |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
