"""The C++ benchmarks still build with the extension's warnings on: native_kernels.cpp (the
sum and Adam kernels timed alone), whose checks (16-bit sums against the scalar conversions,
the 16-bit Adam step against the fp32 step rounded, each vector level's fp32 sum no slower
than the baseline's) pass at every level the CPU has, and whose tables have a row for each
level (and, for the Adam step in L1, each layout); and
page_offsets.cpp (streams over page-aligned arrays; built only: it maps 512 MiB)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from accel.ops import _cpu_optim

ROOT = Path(__file__).resolve().parents[2]
# setup.py's optimisation and warning flags, warnings as errors.
FLAGS = [
    *("-O3", "-fno-math-errno", "-fno-trapping-math", "-std=c++17"),
    *("-Wall", "-Wextra", "-Werror"),
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the vector levels are x86-64 only"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++, as building accel does"),
]


def test_the_native_kernel_benchmark_builds_checks_and_times_each_level(tmp_path: Path) -> None:
    program = tmp_path / "native_kernels"
    source = ROOT / "benchmarks" / "native_kernels.cpp"
    build = subprocess.run(
        ["g++", *FLAGS, "-I", str(ROOT / "csrc"), str(source), "-o", str(program)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    run = subprocess.run(
        [str(program), "--quick"], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| x86-64")]
    levels = {"x86-64-v4": ["x86-64-v4", "x86-64-v3"], "x86-64-v3": ["x86-64-v3"], "baseline": []}
    # One row per level in each table (the sums' at one size with --quick, then Adam's),
    # then one per level and layout in the table of Adam's arithmetic in L1.
    expected = levels[_cpu_optim.cpu_isa()] * 2 + [
        level for level in levels[_cpu_optim.cpu_isa()] for _ in range(5)
    ]
    assert [row.split(" | ")[0].strip("| ") for row in rows] == expected


def test_the_page_offsets_benchmark_builds(tmp_path: Path) -> None:
    source = ROOT / "benchmarks" / "page_offsets.cpp"
    build = subprocess.run(
        ["g++", *FLAGS, "-fopenmp", "-I", str(ROOT / "csrc"), str(source), "-o", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
