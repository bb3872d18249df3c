"""Fabric and the Trainer with ``accelerator="accel"``: the same losses as Lightning's own.

Each run is one fresh process, or 2 DDP processes, of tests/integrations/lightning/train.py
that trains with Fabric and then with the Trainer (each in a process group of its own), so
one import of Lightning serves both APIs: on the CPU backend against Lightning's ``"cpu"``
accelerator, and on the fake PrivateUse1 device (tests/support/fake_device.py) against the
CPU's numbers. Every comparison is API against the same API: Fabric's records against
Fabric's, the Trainer's against the Trainer's. Lightning's own ``"cpu"`` runs are made
once per session (the ``reference`` fixture): 1 process, and 2 under ``accel run``.
The refusals run in one process too, each API's error read from its part of stderr. The
fake device's autograd engine knows one device index per process (torch's Python device
guard reports a single device), so its 2-process runs are two one-device nodes on this
host, as a multi-node job would place them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.once import once_per_session
from tests.support.ports import free_port

pytestmark = pytest.mark.slow  # every test starts Lightning in other processes

TRAIN = Path(__file__).resolve().parent / "train.py"
APIS = ["fabric", "trainer"]
BOTH = ["--api", *APIS]  # what every training run trains with, in this order
FAKE = ["--fake", "accelfake"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "PL_", "LT_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def _out(tmp_path: Path) -> Path:
    """A fresh directory for one run's rank<N>-<api>.json files."""
    out = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    out.mkdir()
    return out


Records = dict[str, list[dict[str, Any]]]


def _records(out: Path, ranks: int) -> Records:
    """Each API's records, in rank order: one per rank, or the test fails."""
    records = [json.loads(path.read_text()) for path in out.glob("rank*-*.json")]
    by_api = {api: [r for r in records if r["api"] == api] for api in APIS}
    for api, ranked in by_api.items():
        ranked.sort(key=lambda r: r["rank"])
        assert [r["rank"] for r in ranked] == list(range(ranks)), f"{api}'s records"
    return by_api


def _run(tmp_path: Path, *args: str) -> Records:
    out = _out(tmp_path)
    command = [sys.executable, str(TRAIN), "--root", str(out), "--out", str(out), *BOTH, *args]
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return _records(out, 1)


def _launch(tmp_path: Path, ranks: int, *args: str) -> Records:
    """``accel run`` on this node: Lightning sees torchelastic's environment and joins it."""
    out = _out(tmp_path)
    command = [sys.executable, "-m", "accel", "run", "--standalone", f"--nproc-per-node={ranks}",
               str(TRAIN), "--root", str(out), "--out", str(out), "--devices", str(ranks),
               *BOTH, *args]  # fmt: skip
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return _records(out, ranks)


def _two_nodes(tmp_path: Path, *args: str) -> Records:
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
             "--devices", "1", "--num-nodes", "2", *BOTH, *args],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-4000:]
    return _records(out, 2)


def _failures(tmp_path: Path, *args: str) -> dict[str, str]:
    """One process that must fail: each API's stderr (train.py opens it with a line
    ``train.py: --api <api>``), for each API it ran."""
    command = [sys.executable, str(TRAIN), "--root", str(tmp_path), "--out", str(tmp_path), *args]
    result = subprocess.run(
        command, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0
    parts = re.split(r"^train\.py: --api (\w+)$", result.stderr, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


Reference = Callable[..., Records]


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """Lightning's own CPU runs, which several tests compare with: ``reference(ranks,
    *args)`` runs each set of arguments once per session, whichever xdist worker asks
    first (``_run`` for one rank, ``_launch`` for more; both APIs), and hands every later
    caller the same records."""

    def run(ranks: int, *args: str) -> Records:
        def make(root: Path) -> Records:
            return _run(root, *args) if ranks == 1 else _launch(root, ranks, *args)

        name = "_".join(["lightning", str(ranks), *(arg.strip("-") for arg in args)])
        records: Records = once_per_session(tmp_path_factory, name, make)
        return records

    return run


def _same_training(ours: Records, theirs: Records) -> None:
    """Each API's run against the same API's reference."""
    for api in APIS:
        assert [r["losses"] for r in ours[api]] == [r["losses"] for r in theirs[api]], api
        assert [r["parameter_sum"] for r in ours[api]] == [
            r["parameter_sum"] for r in theirs[api]
        ], api
        # Metrics averaged over the ranks (sync_dist=True, fabric.all_reduce "mean").
        assert [r["synced"] for r in ours[api]] == [r["synced"] for r in theirs[api]], api
        assert ours[api][0]["losses"][-1] < ours[api][0]["losses"][0], api  # it trained


def test_one_process_on_the_cpu_matches_lightnings_cpu_accelerator(
    tmp_path: Path, reference: Reference
) -> None:
    ours = _run(tmp_path, "--accelerator", "accel")
    _same_training(ours, reference(1, "--accelerator", "cpu"))
    for api in APIS:
        assert ours[api][0]["device"] == "cpu", api


def test_ddp_on_the_cpu_uses_accels_backend_and_matches_gloo(
    tmp_path: Path, reference: Reference
) -> None:
    ours = _launch(tmp_path, 2, "--accelerator", "accel")
    theirs = reference(2, "--accelerator", "cpu")
    _same_training(ours, theirs)
    for api in APIS:
        assert [r["backend"] for r in ours[api]] == ["cpu:accel"] * 2, api
        assert all("gloo" in r["backend"] for r in theirs[api]), api
        # DDP averaged the gradients: both ranks end with the same model.
        assert ours[api][0]["parameter_sum"] == ours[api][1]["parameter_sum"], api


SPAWNED = """
import os, sys, torch, lightning
class Module(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, index):
        return (self.net(batch) ** 2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
if __name__ == "__main__":
    data = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    for accelerator in sys.argv[1:]:  # one interpreter for both: Lightning's import is slow
        # Lightning keeps the port it chose for the first run in MASTER_PORT: a new one.
        os.environ.pop("MASTER_PORT", None)
        module = Module()
        trainer = lightning.Trainer(
            accelerator=accelerator, devices=2, strategy="ddp_spawn", max_epochs=1,
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False)
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
        print("trained:", accelerator, float(sum(p.detach().sum() for p in module.parameters())))
"""


def test_the_trainers_ddp_spawn_on_the_cpu_trains_as_lightnings_cpu(tmp_path: Path) -> None:
    # mp.spawn shares the module it hands each rank; Lightning gives it private memory
    # back only for its "cpu" accelerator: each rank's optimizer stepped the same memory.
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    result = subprocess.run(
        [sys.executable, str(script), "accel", "cpu"], capture_output=True, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    trained = [
        line.split()[1:] for line in result.stdout.splitlines() if line.startswith("trained:")
    ]
    sums = dict(trained)
    assert sums.keys() == {"accel", "cpu"}, result.stdout[-3000:]
    assert sums["accel"] == sums["cpu"]


def test_one_process_on_a_fake_device_trains_there(tmp_path: Path, reference: Reference) -> None:
    ours = _run(tmp_path, *FAKE, "--strategy", "accel_single_device")
    _same_training(ours, reference(1, "--accelerator", "cpu"))
    for api in APIS:
        assert ours[api][0]["device"] == "accelfake:0", api


DEVICES_NAMED = """
import sys
sys.path.insert(0, sys.argv[1])
import fake_device
fake_device.install("accelfake")
import lightning
import accel
def where(**kwargs):
    fabric = lightning.Fabric(accelerator="accel", strategy="accel_single_device", **kwargs)
    trainer = lightning.Trainer(accelerator="accel", strategy="accel_single_device", **kwargs)
    return f"{fabric.device},{trainer.strategy.root_device}"
print(where(devices="1,"), where(devices=[1]), where(devices=[0]))
accel.set_device(1)
print(where(), where(devices=2))  # "auto" names both devices: the current one
"""


def test_one_process_on_the_device_devices_names(tmp_path: Path) -> None:
    # Lightning hands the parsed devices only to a strategy with parallel_devices: the
    # single-device strategy took the current device, accelfake:0, whatever devices said.
    # (Where it runs, not a training: the fake device's autograd has one device's queue.)
    result = subprocess.run(
        [sys.executable, "-c", DEVICES_NAMED, str(ROOT / "tests" / "support")], env=_env(),
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    named, current = result.stdout.splitlines()[-2:]
    assert named.split() == ["accelfake:1,accelfake:1"] * 2 + ["accelfake:0,accelfake:0"]
    assert current.split() == ["accelfake:1,accelfake:1"] * 2


def test_lightnings_ddp_on_a_device_is_refused_naming_accels(tmp_path: Path) -> None:
    # It failed in torch.cuda ("torch.cuda.Stream requires CUDA support"), naming nothing.
    failures = _failures(tmp_path, *BOTH, *FAKE, "--strategy", "ddp")
    assert list(failures) == APIS
    for api, stderr in failures.items():
        assert "is Lightning's DDPStrategy, which creates a torch.cuda.Stream" in stderr, api
        assert "pass strategy='accel_ddp'" in stderr, api


def test_the_default_single_device_strategy_on_a_device_is_refused(tmp_path: Path) -> None:
    failures = _failures(tmp_path, *BOTH, *FAKE)
    assert list(failures) == APIS
    for api, stderr in failures.items():
        assert f"train.py: --api {api} failed" in stderr, api
        assert "handed this process cpu" in stderr, api
        assert "strategy='accel_single_device'" in stderr, api


def test_ddp_on_a_fake_device_matches_the_cpu(tmp_path: Path, reference: Reference) -> None:
    ours = _two_nodes(tmp_path, *FAKE, "--strategy", "accel_ddp")
    _same_training(ours, reference(2, "--accelerator", "cpu"))
    for api in APIS:
        assert [r["device"] for r in ours[api]] == ["accelfake:0"] * 2, api
        # gloo handles the fake device's tensors once named for it; the CPU shares it.
        assert [r["backend"] for r in ours[api]] == ["cpu:gloo,accelfake:gloo"] * 2, api


def test_mixed_precision_plugin_autocasts_like_lightnings_cpu(
    tmp_path: Path, reference: Reference
) -> None:
    ours = _run(tmp_path, "--accel-precision", "bf16-mixed")
    theirs = _run(tmp_path, "--accelerator", "cpu", "--precision", "bf16-mixed")
    full = reference(1, "--accelerator", "cpu")
    _same_training(ours, theirs)
    for api in APIS:
        assert ours[api][0]["losses"] != full[api][0]["losses"], api  # bf16 autocast really ran


def test_the_trainer_refuses_mixed_precision_on_another_device(tmp_path: Path) -> None:
    stderr = _failures(tmp_path, "--api", "trainer", "--precision", "bf16-mixed")["trainer"]
    assert "train.py: --api trainer failed" in stderr
    assert "autocasts on 'cuda', but accel's backend runs on 'cpu'" in stderr
    assert "trainer_precision('bf16-mixed')" in stderr
