"""AdamW step time on the CPU: accel's CPUAdam vs torch (fused, foreach) and DeepSpeed.

    python benchmarks/optim_step.py [--rounds 5] [--steps 3] [--quick | --16-bit] [--case TEXT]
    ACCEL_CPU_ISA=x86-64-v3 python benchmarks/optim_step.py   # a lower instruction-set level

Every method is timed in the same process, round-robin (one round = a few steps of each
method in turn), so the shared machine's noise hits all of them alike; the table reports
the median time per step over the rounds. Effective bandwidth counts the 28 bytes an fp32
AdamW step must move per parameter (read p, g, m, v; write p, m, v). The roofline is the
time a threaded in-place read-modify-write over the same number of bytes takes, measured
in this run with accel's own probe (`scale_in_place`, x *= a: 8 bytes per element).
16-bit cases (bf16 or fp16 parameters and gradients, fp32 states: 22 bytes per parameter,
ideally 0.79x of fp32's time) also time accel's fp32 step on the same shapes in the same
rounds ("accel CPUAdam fp32") and report the median of the rounds' 16-bit / fp32 ratios.
The header names the kernels' instruction-set level (accel/ops/isa.py).
benchmarks/optim_bound.py sets each layout's step against its byte bound, every level.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from accel.ops import _cpu_optim, isa  # noqa: E402  (_cpu_optim: the roofline probe)
from accel.optim import CPUAdam  # noqa: E402

BYTES_PER_PARAM = 28
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def gpt2_small_shapes() -> list[tuple[int, ...]]:
    """The 148 parameter tensors of GPT-2 small (124M parameters)."""
    d, vocab, context, layers = 768, 50257, 1024, 12
    shapes: list[tuple[int, ...]] = [(vocab, d), (context, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,),
                   (d, 4 * d), (4 * d,), (4 * d, d), (d,)]  # fmt: skip
    return [*shapes, (d,), (d,)]


@dataclass
class Case:
    """One benchmark configuration."""

    name: str
    shapes: list[tuple[int, ...]]
    dtype: torch.dtype = torch.float32

    @property
    def numel(self) -> int:
        """Total parameters."""
        return sum(torch.Size(s).numel() for s in self.shapes)


FP32_REFERENCE = "accel CPUAdam fp32"


def _params(case: Case, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    dtype = dtype or case.dtype
    params = []
    for shape in case.shapes:
        p = torch.randn(shape).to(dtype).requires_grad_()
        p.grad = torch.randn(shape).to(dtype) * 1e-3
        params.append(p)
    return params


def _methods(case: Case) -> dict[str, Callable[[], None]]:
    """A step function per method, each with its own parameters and state."""
    methods: dict[str, Callable[[], None]] = {}
    ours = CPUAdam(_params(case), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    methods["accel CPUAdam"] = ours.step  # type: ignore[assignment]
    if case.dtype != torch.float32:
        reference = CPUAdam(
            _params(case, torch.float32), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD
        )
        methods[FP32_REFERENCE] = reference.step  # type: ignore[assignment]
        return methods  # torch's reference points are fp32 runs
    fused = torch.optim.AdamW(
        _params(case), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, fused=True
    )
    methods["torch fused"] = fused.step  # type: ignore[assignment]
    foreach = torch.optim.AdamW(
        _params(case), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=True
    )
    methods["torch foreach"] = foreach.step  # type: ignore[assignment]
    if importlib.util.find_spec("deepspeed") is not None:
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # type: ignore[import-not-found]

        deepspeed = DeepSpeedCPUAdam(
            _params(case), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, adamw_mode=True
        )
        methods["DeepSpeedCPUAdam"] = deepspeed.step
    return methods


def _roofline_seconds(numel: int, rounds: int) -> float:
    """Time to stream 28 bytes per parameter with an in-place read-modify-write."""
    probe = torch.ones(min(numel * BYTES_PER_PARAM // 8, 1 << 28))
    _cpu_optim.scale_in_place(probe.data_ptr(), probe.numel(), 1.0)  # warm up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        _cpu_optim.scale_in_place(probe.data_ptr(), probe.numel(), 1.0)
        samples.append(time.perf_counter() - start)
    bytes_moved = probe.numel() * 8
    return statistics.median(samples) * (numel * BYTES_PER_PARAM) / bytes_moved


def run_case(case: Case, rounds: int, steps: int) -> tuple[dict[str, float], float | None]:
    """Median seconds per step for each method, plus the roofline; and for a 16-bit case
    the median of the rounds' 16-bit / fp32 time ratios."""
    methods = _methods(case)
    for step in methods.values():
        step()  # warm up: allocate state
    samples: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, step in methods.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            samples[name].append((time.perf_counter() - start) / steps)
    result = {name: statistics.median(times) for name, times in samples.items()}
    result["roofline"] = _roofline_seconds(case.numel, rounds)
    ratio = None
    if FP32_REFERENCE in samples:
        pairs = zip(samples["accel CPUAdam"], samples[FP32_REFERENCE], strict=True)
        ratio = statistics.median(ours / fp32 for ours, fp32 in pairs)
    del methods
    gc.collect()
    return result, ratio


def main() -> None:
    """Run every case and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="only the 1M and 16M cases")
    parser.add_argument(
        "--16-bit", dest="sixteen_bit", action="store_true",
        help="only the 16-bit cases (each timed against fp32 in the same rounds)",
    )  # fmt: skip
    parser.add_argument(
        "--case", default="", help="only the cases whose name contains this text, e.g. '64M bf16'"
    )
    args = parser.parse_args()

    cases = [Case("1M fp32", [(1 << 20,)]), Case("16M fp32", [(16 << 20,)])]
    if not args.quick:
        cases += [
            Case("64M fp32", [(64 << 20,)]),
            Case("GPT-2 small fp32 (148 tensors)", gpt2_small_shapes()),
            Case("64M bf16 params+grads", [(64 << 20,)], torch.bfloat16),
            Case("GPT-2 small bf16 (148 tensors)", gpt2_small_shapes(), torch.bfloat16),
            Case("64M fp16 params+grads", [(64 << 20,)], torch.float16),
            # In the last-level cache: what the 16-bit conversions cost in arithmetic.
            Case("1M bf16 params+grads", [(1 << 20,)], torch.bfloat16),
            Case("1M fp16 params+grads", [(1 << 20,)], torch.float16),
            # Small tensors: what the per-tensor work in Python costs against the kernel.
            Case("150 tensors x 4K fp32", [(4096,)] * 150),
        ]
    if args.sixteen_bit:
        cases = [case for case in cases if case.dtype != torch.float32]
    cases = [case for case in cases if args.case in case.name]
    if not cases:
        parser.error(f"--case {args.case!r} names no case of this run")
    native = _cpu_optim
    print(f"torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
          f"{native.max_threads()} accel threads, kernels: {isa.describe()}")  # fmt: skip
    print("| case | method | ms/step | vs accel | GB/s (28 B/param) | roofline fraction |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        result, ratio = run_case(case, args.rounds, args.steps)
        roofline = result.pop("roofline")
        ours = result["accel CPUAdam"]
        for name, seconds in result.items():
            relation = f"{seconds / ours:.2f}x"
            if name == "accel CPUAdam" and ratio is not None:
                relation = f"{ratio:.2f}x of fp32"
            bandwidth = case.numel * BYTES_PER_PARAM / seconds / 1e9
            print(f"| {case.name} | {name} | {seconds * 1e3:.3g} | {relation} | {bandwidth:.1f} | "
                  f"{roofline / seconds:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
