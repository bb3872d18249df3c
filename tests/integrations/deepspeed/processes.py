"""Fresh Python processes for the DeepSpeed integration's tests (installing is per process)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from tests.support import ROOT

SCRIPTS = pathlib.Path(__file__).resolve().parent / "scripts"


# The module accel's DeepSpeed builders are defined in (what DeepSpeed must end up bound to).
ACCEL_BUILDERS = ["accel.integrations.deepspeed.op_builders"]
REFERENCE = json.loads((SCRIPTS / "zero_reference.json").read_text())


def fresh_env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ACCEL_DEEPSPEED", "DS_ACCELERATOR")}
    extensions = tmp_path / "torch_extensions"
    extensions.mkdir(exist_ok=True)
    env.update(TORCH_EXTENSIONS_DIR=str(extensions), OMP_NUM_THREADS="1", **extra)
    return env


def run_python(
    code: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter, from the repository's root."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def last_json(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_no_jit(tmp_path: pathlib.Path) -> None:
    assert not any((tmp_path / "torch_extensions").iterdir()), "something was JIT-compiled"


def last_json_list(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr[-4000:]
    value: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return value


def torchrun(
    script: pathlib.Path, ranks: int, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
         "--standalone", str(script), *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
