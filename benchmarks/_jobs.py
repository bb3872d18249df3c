"""Jobs for the training-step benchmarks (ddp.py, zero_step.py): a worker script run under
torchrun, whose rank 0 prints one ``RESULT <json>`` line. Imported from beside them (the
script's folder is on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
"""glibc's malloc thresholds, fixed. Left dynamic, they make some jobs, in any variant, map
fresh pages for every step's gradients (``zero_grad`` frees them): ~50,000 page faults and
70-80 ms of system time a step at 50M parameters, which swamps the differences between
backends."""


def job_env(steady_malloc: bool, **extra: str) -> dict[str, str]:
    """This process's environment for the ranks: one OpenMP thread each unless
    ``OMP_NUM_THREADS`` says otherwise, :data:`STEADY_MALLOC` if asked, and ``extra``."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **extra)
    if steady_malloc:
        env.update(STEADY_MALLOC)
    return env


def run_job(script: str, ranks: int, args: list[str], env: dict[str, str]) -> dict[str, object]:
    """Run ``script`` on ``ranks`` ranks of one node; its rank 0's result. Exits naming the
    job and showing its stderr's end if it fails."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", script, *args]  # fmt: skip
    run = subprocess.run(
        command, env=env, capture_output=True, text=True, check=False,
        cwd=os.path.dirname(script),
    )  # fmt: skip
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    if run.returncode != 0 or not lines:
        sys.exit(f"{' '.join(args)} failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    result: dict[str, object] = json.loads(lines[0][len("RESULT ") :])
    return result


def share_removed(gloo: float, variant: float, floor: float) -> float:
    """The share of gloo's exchange cost a variant removes: ``(gloo - variant) / (gloo -
    floor)`` (NaN where gloo is not above the floor)."""
    return (gloo - variant) / (gloo - floor) if gloo > floor else float("nan")
