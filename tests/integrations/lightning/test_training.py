"""Fabric and the Trainer with ``accelerator="accel"``: the same losses as Lightning's own.

Each run is a fresh process (tests/integrations/lightning/train.py): on the CPU backend
against Lightning's ``"cpu"`` accelerator, and on the fake PrivateUse1 device
(tests/support/fake_device.py) against the CPU's numbers, in 1 process and in 2 DDP
processes. The fake device's autograd engine knows one device index per process (torch's
Python device guard reports a single device), so its 2-process runs are two one-device
nodes on this host, as a multi-node job would place them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.ports import free_port

pytestmark = pytest.mark.slow  # every test starts Lightning in other processes

TRAIN = Path(__file__).resolve().parent / "train.py"
APIS = ["fabric", "trainer"]
FAKE = ["--fake", "accelfake"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "PL_", "LT_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def _out(tmp_path: Path) -> Path:
    """A fresh directory for one run's rank<N>.json files."""
    out = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    out.mkdir()
    return out


def _ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]


def _run(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = _out(tmp_path)
    command = [sys.executable, str(TRAIN), "--root", str(out), "--out", str(out), *args]
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return _ranks(out)


def _launch(tmp_path: Path, ranks: int, *args: str) -> list[dict[str, Any]]:
    """``accel run`` on this node: Lightning sees torchelastic's environment and joins it."""
    out = _out(tmp_path)
    command = [sys.executable, "-m", "accel", "run", "--standalone", f"--nproc-per-node={ranks}",
               str(TRAIN), "--root", str(out), "--out", str(out), "--devices", str(ranks),
               *args]  # fmt: skip
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return _ranks(out)


def _two_nodes(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    """Two one-device nodes on this host, started by hand as Lightning documents it."""
    port = str(free_port())
    out = _out(tmp_path)
    processes = []
    for node in range(2):
        env = _env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NODE_RANK=str(node), LOCAL_RANK="0",
                   WORLD_SIZE="2")  # fmt: skip
        processes.append(subprocess.Popen(
            [sys.executable, str(TRAIN), "--root", str(out / f"node{node}"), "--out", str(out),
             "--devices", "1", "--num-nodes", "2", *args],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-4000:]
    return _ranks(out)


Reference = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """Lightning's own CPU runs, which several tests compare with: ``reference(ranks,
    *args)`` runs each set of arguments once per test process (``_run`` for one rank,
    ``_launch`` for more) and hands every later caller the same ranks' records."""
    root = tmp_path_factory.mktemp("reference")
    made: dict[tuple[object, ...], list[dict[str, Any]]] = {}

    def run(ranks: int, *args: str) -> list[dict[str, Any]]:
        key = (ranks, *args)
        if key not in made:
            made[key] = _run(root, *args) if ranks == 1 else _launch(root, ranks, *args)
        return made[key]

    return run


def _same_training(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert [r["losses"] for r in ours] == [r["losses"] for r in theirs]
    assert [r["parameter_sum"] for r in ours] == [r["parameter_sum"] for r in theirs]
    assert ours[0]["losses"][-1] < ours[0]["losses"][0]  # it trained


@pytest.mark.parametrize("api", APIS)
def test_one_process_on_the_cpu_matches_lightnings_cpu_accelerator(
    api: str, tmp_path: Path, reference: Reference
) -> None:
    ours = _run(tmp_path, "--api", api, "--accelerator", "accel")
    theirs = reference(1, "--api", api, "--accelerator", "cpu")
    _same_training(ours, theirs)
    assert ours[0]["device"] == "cpu"


@pytest.mark.parametrize("api", APIS)
def test_ddp_on_the_cpu_uses_accels_backend_and_matches_gloo(
    api: str, tmp_path: Path, reference: Reference
) -> None:
    ours = _launch(tmp_path, 2, "--api", api, "--accelerator", "accel")
    theirs = reference(2, "--api", api, "--accelerator", "cpu")
    _same_training(ours, theirs)
    assert [r["backend"] for r in ours] == ["cpu:accel"] * 2
    assert all("gloo" in r["backend"] for r in theirs)
    # DDP averaged the gradients: both ranks end with the same model.
    assert ours[0]["parameter_sum"] == ours[1]["parameter_sum"]


@pytest.mark.parametrize("api", APIS)
def test_one_process_on_a_fake_device_trains_there(
    api: str, tmp_path: Path, reference: Reference
) -> None:
    ours = _run(tmp_path, "--api", api, *FAKE, "--strategy", "accel_single_device")
    _same_training(ours, reference(1, "--api", api, "--accelerator", "cpu"))
    assert ours[0]["device"] == "accelfake:0"


@pytest.mark.parametrize("api", APIS)
def test_the_default_single_device_strategy_on_a_device_is_refused(
    api: str, tmp_path: Path
) -> None:
    command = [sys.executable, str(TRAIN), "--root", str(tmp_path), "--out", str(tmp_path),
               "--api", api, *FAKE]  # fmt: skip
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0
    assert "handed this process cpu" in result.stderr
    assert "strategy='accel_single_device'" in result.stderr


@pytest.mark.parametrize("api", APIS)
def test_ddp_on_a_fake_device_matches_the_cpu(
    api: str, tmp_path: Path, reference: Reference
) -> None:
    ours = _two_nodes(tmp_path, "--api", api, *FAKE, "--strategy", "accel_ddp")
    _same_training(ours, reference(2, "--api", api, "--accelerator", "cpu"))
    assert [r["device"] for r in ours] == ["accelfake:0"] * 2
    # gloo handles the fake device's tensors once named for it; the CPU shares it.
    assert [r["backend"] for r in ours] == ["cpu:gloo,accelfake:gloo"] * 2


@pytest.mark.parametrize("api", APIS)
def test_mixed_precision_plugin_autocasts_like_lightnings_cpu(
    api: str, tmp_path: Path, reference: Reference
) -> None:
    ours = _run(tmp_path, "--api", api, "--accel-precision", "bf16-mixed")
    theirs = _run(tmp_path, "--api", api, "--accelerator", "cpu", "--precision", "bf16-mixed")
    full = reference(1, "--api", api, "--accelerator", "cpu")
    _same_training(ours, theirs)
    assert ours[0]["losses"] != full[0]["losses"]  # bf16 autocast really ran


def test_the_trainer_refuses_mixed_precision_on_another_device(tmp_path: Path) -> None:
    command = [sys.executable, str(TRAIN), "--root", str(tmp_path), "--out", str(tmp_path),
               "--api", "trainer", "--precision", "bf16-mixed"]  # fmt: skip
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0
    assert "autocasts on 'cuda', but accel's backend runs on 'cpu'" in result.stderr
    assert "trainer_precision('bf16-mixed')" in result.stderr
