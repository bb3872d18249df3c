"""accel's start-up in fresh interpreters, timed inside each process after ``import torch``:

- ``import accel; accel.get_accelerator()`` (selection: entry points, backend classes,
  probes);
- then ``accel.get_accelerator().create_op_builder("CPUAdamBuilder").load()`` (the op
  table, the catalog, the prebuilt module and its front door).

    python benchmarks/startup.py [--runs 7] [PYTHON ...]

Each PYTHON (default: this one) is an interpreter of an environment with accel installed;
with several, their processes alternate, so a busy spell hits them alike. The processes
run in an empty directory: from a repository's root, ``python -c`` would import the
working tree's accel, not the installed one. They run with Python's bytecode cache on
(PYTHONDONTWRITEBYTECODE unset), after one process per interpreter that is not counted:
the first start after an install or an edit compiles what it imports, which a user's
processes do not pay again (with the cache off, every start of an editable install
compiles accel: ~120 ms more here). Prints the median and the best of ``--runs``
processes, wall and CPU time of the process (``time.process_time``), in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = """
import time, warnings
warnings.filterwarnings("ignore")
import torch
wall, cpu = time.perf_counter(), time.process_time()
import accel
acc = accel.get_accelerator()
selected = time.perf_counter() - wall, time.process_time() - cpu
wall, cpu = time.perf_counter(), time.process_time()
acc.create_op_builder("CPUAdamBuilder").load()
loaded = time.perf_counter() - wall, time.process_time() - cpu
print(*(f"{seconds * 1e3:.3f}" for seconds in (*selected, *loaded)))
"""
"""Prints four times in ms: selection wall and CPU, then the builder's load wall and CPU."""

FIGURES = ("get_accelerator() wall", "get_accelerator() CPU", "load() wall", "load() CPU")


def sample(python: str, directory: str) -> list[float]:
    """The four times of :data:`PROBE` in one fresh process of ``python``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(
        [python, "-c", PROBE], cwd=directory, env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{python}: the probe failed:\n{result.stderr[-3000:]}")
    return [float(value) for value in result.stdout.split()]


def measure(pythons: list[str], runs: int) -> dict[str, list[list[float]]]:
    """``runs`` samples of each interpreter, alternating between them, after one that is
    not counted."""
    samples: dict[str, list[list[float]]] = {python: [] for python in pythons}
    with tempfile.TemporaryDirectory() as directory:
        for python in pythons:
            sample(python, directory)  # fills the bytecode cache
        for _ in range(runs):
            for python in pythons:
                samples[python].append(sample(python, directory))
    return samples


def main() -> None:
    """Measure and print one table row per interpreter."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per interpreter")
    parser.add_argument("pythons", nargs="*", default=[sys.executable], metavar="PYTHON")
    args = parser.parse_args()
    samples = measure(args.pythons, args.runs)
    print(f"median (best) of {args.runs} fresh processes, ms")
    print("| interpreter | " + " | ".join(FIGURES) + " |")
    print("|---|" + "---|" * len(FIGURES))
    for python, rows in samples.items():
        columns = list(zip(*rows, strict=True))
        cells = [f"{statistics.median(c):.1f} ({min(c):.1f})" for c in columns]
        print(f"| {python} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
