"""benchmarks/optim_bound.py runs each level it is given in an interpreter of its own (the
level is decided once per process) and prints a row per layout with the step's bytes per
parameter, and a line of probe rates per run: a small run at the baseline level, which
every CPU has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # starts interpreters


def test_the_byte_bound_benchmark_prints_every_layout_at_the_level_asked() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "optim_bound.py"), "--numel", "70001",
         "--rounds", "1", "--levels", "baseline"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split(" | ") for line in run.stdout.splitlines() if line.startswith("| baseline")]
    layouts = {row[1]: int(row[2]) for row in rows}
    assert layouts == {
        "fp32": 28, "bf16, fp32 states": 22, "bf16, bf16 states": 14,
        "fp16, fp32 states": 22, "fp16, fp16 states": 14,
    }  # fmt: skip
    assert all(float(row[5]) > 0 for row in rows)  # step / bound
    assert "- baseline: in place" in run.stdout


def test_a_level_the_cpu_lacks_is_refused_by_name() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "optim_bound.py"), "--levels", "x86-64-v9"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode != 0
    assert "x86-64-v9" in run.stderr
