"""Adam step with 16-bit optimizer states against float32 ones, accel's kernels alone.

    python benchmarks/adam_states.py [--numel 67108864] [--rounds 9] [--stagger]
    ACCEL_CPU_ISA=x86-64-v3 python benchmarks/adam_states.py   # a lower instruction-set level

DeepSpeed's ``fp32_optimizer_states=False`` keeps Adam's two states in the parameters'
dtype. One ``accel.ops.cpu_optim.adam_step`` call per step on one tensor, three layouts,
timed in turn in every round (the shared machine's noise hits all alike):

- fp32 parameters, gradients and states: 28 bytes per parameter (read p, g, m, v; write
  p, m, v);
- bf16 parameters and gradients, fp32 states: 22 bytes, ideally 0.79x of fp32's time;
- bf16 (or fp16) parameters, gradients and states: 14 bytes, ideally 0.5x.

The table gives the median time per step and the median of the rounds' ratios to fp32.

Tensors this large get pages of their own (mmap), so p, g, m and v all start at the same
offset within a 4 KiB page and lie 128 MiB + 4 KiB apart; on this project's machines (AMD
EPYC) such lines evict one another from the L1 cache (benchmarks/page_offsets.cpp shows it
alone). ``--stagger`` starts tensor k of each layout 1056 * k elements into an allocation
of its own, as smaller tensors carved from the heap often are, to time the kernels without
that effect.
The header names the kernels' instruction-set level (accel/ops/isa.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from accel.ops import cpu_optim, isa  # noqa: E402

LAYOUTS = {  # name: (parameter and gradient dtype, state dtype, bytes per parameter)
    "fp32": (torch.float32, torch.float32, 28),
    "bf16, fp32 states": (torch.bfloat16, torch.float32, 22),
    "bf16, bf16 states": (torch.bfloat16, torch.bfloat16, 14),
    "fp16, fp16 states": (torch.float16, torch.float16, 14),
}


def main() -> None:
    """Time every layout round-robin and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--stagger", action="store_true", help="tensors at different offsets within a page"
    )
    args = parser.parse_args()

    def tensor(k: int, values: torch.Tensor) -> torch.Tensor:
        offset = 1056 * k if args.stagger else 0
        whole = torch.empty(args.numel + offset, dtype=values.dtype)
        return whole[offset:].copy_(values)

    tensors = {}
    for name, (dtype, state_dtype, _) in LAYOUTS.items():
        tensors[name] = (
            tensor(0, torch.randn(args.numel).to(dtype)),
            tensor(1, (torch.randn(args.numel) * 1e-3).to(dtype)),
            tensor(2, torch.zeros(args.numel, dtype=state_dtype)),
            tensor(3, torch.full((args.numel,), 1e-6, dtype=state_dtype)),
        )
    steps = dict.fromkeys(LAYOUTS, 0)
    times: dict[str, list[float]] = {name: [] for name in LAYOUTS}

    def step(name: str) -> float:
        p, g, m, v = tensors[name]
        steps[name] += 1
        start = time.perf_counter()
        cpu_optim.adam_step([p], [g], [m], [v], [steps[name]], lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01, adamw=True)  # fmt: skip
        return time.perf_counter() - start

    for name in LAYOUTS:  # first touch and warm-up
        step(name)
    for _ in range(args.rounds):
        for name in LAYOUTS:
            times[name].append(step(name))
    print(f"{args.numel / 1e6:.0f} M parameters, {args.rounds} rounds, "
          f"{'staggered' if args.stagger else 'page-aligned'} tensors, torch {torch.__version__}, "
          f"kernels: {isa.describe()}\n")  # fmt: skip
    print("| layout | ms/step | GB/s | time / fp32's (median of rounds) | ideal |")
    print("|---|---|---|---|---|")
    for name, (_, _, nbytes) in LAYOUTS.items():
        ratio = statistics.median(t / f for t, f in zip(times[name], times["fp32"], strict=True))
        seconds = statistics.median(times[name])
        print(f"| {name} | {seconds * 1e3:.1f} | {args.numel * nbytes / seconds / 1e9:.1f} | "
              f"{ratio:.2f}x | {nbytes / 28:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
