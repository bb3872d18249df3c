"""Each Adam step's time against its byte bound, at every instruction-set level the CPU runs.

    python benchmarks/optim_bound.py [--numel 67108864] [--rounds 9] [--runs 1] [--stagger]
    python benchmarks/optim_bound.py --levels x86-64-v3   # one level (comma-separated list)

One `accel.ops.cpu_optim.adam_step` call per step on one tensor of each layout:

- fp32 parameters, gradients and states: 28 bytes per parameter (read p, g, m, v; write
  p, m, v);
- bf16 (fp16) parameters and gradients with fp32 states: 22 bytes;
- bf16 (fp16) parameters, gradients and states (DeepSpeed's fp32_optimizer_states=False):
  14 bytes.

A step's byte bound is its bytes over the rate of the fastest pure stream over memory
measured in the same run: each round first times two probes on buffers as large as the
biggest step's bytes, an in-place read-modify-write (x *= 1, accel's ``scale_in_place``:
what the step does to p, m and v) and a copy (``torch.Tensor.copy_``), each counted as
bytes read plus bytes written; then every layout's step. A copy also reads every line it
writes before writing it (a write-allocate), so it moves more than it counts and its rate
is the lower; the in-place rate is the bound. "step / bound" is the median of the rounds'
step time over that round's bound; "vs fp32" the median of the rounds' time over the fp32
step's. The ideal ratio to fp32 is the ratio of bytes: 22/28 = 0.79, 14/28 = 0.50.

Each level runs in an interpreter of its own (``ACCEL_CPU_ISA=<level>``: the level is
decided once per process, csrc/common/simd.h), one after another, never concurrently;
``--runs 2`` alternates the levels twice.

Tensors this large get pages of their own (mmap), so p, g, m and v start at the same offset
within a 4 KiB page; ``--stagger`` starts tensor k of a layout 1056 * k elements into an
allocation of its own, as heap-carved smaller tensors often are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from accel.ops import _cpu_optim, cpu_optim, isa  # noqa: E402

LEVELS = ("x86-64-v4", "x86-64-v3", "baseline")  # best first, as csrc/common/simd.h orders them
LAYOUTS = {  # name: (parameter and gradient dtype, state dtype)
    "fp32": (torch.float32, torch.float32),
    "bf16, fp32 states": (torch.bfloat16, torch.float32),
    "bf16, bf16 states": (torch.bfloat16, torch.bfloat16),
    "fp16, fp32 states": (torch.float16, torch.float32),
    "fp16, fp16 states": (torch.float16, torch.float16),
}


def bytes_per_param(layout: str) -> int:
    """Bytes one step moves per parameter: read p, g, m, v; write p, m, v."""
    dtype, state_dtype = LAYOUTS[layout]
    return 3 * dtype.itemsize + 4 * state_dtype.itemsize


def _child(numel: int, rounds: int, stagger: bool) -> None:
    """Time the probes and every layout's step at this process's level; print JSON."""

    def tensor(k: int, values: torch.Tensor) -> torch.Tensor:
        offset = 1056 * k if stagger else 0
        whole = torch.empty(numel + offset, dtype=values.dtype)
        return whole[offset:].copy_(values)

    tensors = {}
    for name, (dtype, state_dtype) in LAYOUTS.items():
        tensors[name] = (
            tensor(0, torch.randn(numel).to(dtype)),
            tensor(1, (torch.randn(numel) * 1e-3).to(dtype)),
            tensor(2, torch.zeros(numel, dtype=state_dtype)),
            tensor(3, torch.full((numel,), 1e-6, dtype=state_dtype)),
        )
    probe_numel = numel * max(map(bytes_per_param, LAYOUTS)) // 8  # 2 x 4 bytes per element
    source, target = torch.ones(probe_numel), torch.ones(probe_numel)
    steps = dict.fromkeys(LAYOUTS, 0)

    def step(name: str) -> float:
        p, g, m, v = tensors[name]
        steps[name] += 1
        start = time.perf_counter()
        cpu_optim.adam_step([p], [g], [m], [v], [steps[name]], lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01, adamw=True)  # fmt: skip
        return time.perf_counter() - start

    def rate(probe: str) -> float:  # bytes read plus bytes written, per second
        start = time.perf_counter()
        if probe == "in place":
            _cpu_optim.scale_in_place(target.data_ptr(), probe_numel, 1.0)
        else:
            target.copy_(source)
        return 8 * probe_numel / (time.perf_counter() - start)

    for name in LAYOUTS:  # warm up
        step(name)
    rate("in place"), rate("copy")
    samples: dict[str, list[float]] = {name: [] for name in (*LAYOUTS, "in place", "copy")}
    for _ in range(rounds):
        samples["in place"].append(rate("in place"))
        samples["copy"].append(rate("copy"))
        for name in LAYOUTS:
            samples[name].append(step(name))
    print(json.dumps({"level": _cpu_optim.isa(), "describe": isa.describe(), "samples": samples}))


def _run_level(level: str, args: argparse.Namespace) -> dict[str, object]:
    command = [sys.executable, __file__, "--child", f"--numel={args.numel}",
               f"--rounds={args.rounds}", *(["--stagger"] if args.stagger else [])]  # fmt: skip
    env = {**os.environ, "ACCEL_CPU_ISA": level}
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"the {level} run failed (exit {result.returncode}):\n{result.stderr}")
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def _rows(report: dict[str, object], numel: int) -> list[str]:
    samples = report["samples"]
    assert isinstance(samples, dict)
    in_place = samples["in place"]
    rows = []
    for name in LAYOUTS:
        nbytes = numel * bytes_per_param(name)
        times = samples[name]
        bound = statistics.median(t * r / nbytes for t, r in zip(times, in_place, strict=True))
        to_fp32 = statistics.median(t / f for t, f in zip(times, samples["fp32"], strict=True))
        seconds = statistics.median(times)
        rows.append(
            f"| {report['level']} | {name} | {bytes_per_param(name)} | {seconds * 1e3:.1f} | "
            f"{nbytes / seconds / 1e9:.1f} | {bound:.2f} | {to_fp32:.2f}x | "
            f"{bytes_per_param(name) / 28:.2f}x |"
        )
    return rows


def main() -> None:
    """Run every level in turn and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=1, help="how many times to run each level")
    parser.add_argument("--levels", default="", help="comma-separated; default: all the CPU runs")
    parser.add_argument("--stagger", action="store_true", help="tensors at different page offsets")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.numel, args.rounds, args.stagger)
        return
    runnable = LEVELS[LEVELS.index(_cpu_optim.cpu_isa()) :]
    levels = args.levels.split(",") if args.levels else list(runnable)
    for level in levels:
        if level not in runnable:
            parser.error(f"--levels names {level!r}; this CPU runs {', '.join(runnable)}")
    print(f"{args.numel / 2**20:g} Mi parameters, {args.rounds} rounds, "
          f"{'staggered' if args.stagger else 'page-aligned'} tensors, torch {torch.__version__}, "
          f"{_cpu_optim.max_threads()} threads, CPU: {_cpu_optim.cpu_isa()}\n")  # fmt: skip
    print("| level | layout | B/param | ms/step | GB/s | step / bound | vs fp32 | ideal |")
    print("|---|---|---|---|---|---|---|---|")
    probes = []
    for _ in range(args.runs):
        for level in levels:
            report = _run_level(level, args)
            samples = report["samples"]
            assert isinstance(samples, dict)
            probes.append(
                f"{level}: in place {statistics.median(samples['in place']) / 1e9:.1f} GB/s, "
                f"copy {statistics.median(samples['copy']) / 1e9:.1f} GB/s"
            )
            for row in _rows(report, args.numel):
                print(row, flush=True)
    print("\nProbes, medians of the rounds (bytes read + written per second):")
    for line in probes:
        print(f"- {line}")


if __name__ == "__main__":
    main()
