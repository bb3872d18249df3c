"""``make_default`` and ``set_default_backend``: torch's device -> backend map."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch.distributed as dist

import accel.process_group as accel_pg
from tests.support import ROOT

pytestmark = pytest.mark.usefixtures("default_backend_map")


def test_make_default_puts_accel_on_the_cpu_and_returns_what_it_replaced() -> None:
    previous = dist.Backend.default_device_backend_map["cpu"]
    assert accel_pg.make_default() == previous
    assert dist.Backend.default_device_backend_map["cpu"] == "accel"
    assert dist.Backend.default_device_backend_map["cuda"] == "nccl"  # others untouched
    assert accel_pg.set_default_backend("cpu", previous) == "accel"
    assert dist.Backend.default_device_backend_map["cpu"] == previous


def test_per_device_strings_are_accepted_and_none_removes() -> None:
    assert accel_pg.set_default_backend("npu", "cpu:gloo,npu:gloo") is None
    assert dist.Backend.default_device_backend_map["npu"] == "cpu:gloo,npu:gloo"
    assert accel_pg.set_default_backend("npu", None) == "cpu:gloo,npu:gloo"
    assert "npu" not in dist.Backend.default_device_backend_map


@pytest.mark.parametrize(
    ("device_type", "backend", "message"),
    [
        ("cpu", "nonesuch", "'nonesuch' for device type 'cpu': expected a registered"),
        ("cpu", "cpu:nonesuch", "expected a registered"),
        ("cpu", "cpu:gloo,gloo", "'device:backend' pairs"),
        ("cpu", "nccl", "'nccl' does not handle device type 'cpu'; it handles \\['cuda'\\]"),
        ("npu", "gloo", "name it per device: 'npu:gloo'"),
    ],
)
def test_bad_defaults_are_refused_and_change_nothing(
    device_type: str, backend: str, message: str
) -> None:
    before = dict(dist.Backend.default_device_backend_map)
    with pytest.raises(ValueError, match=message):
        accel_pg.set_default_backend(device_type, backend)
    assert dist.Backend.default_device_backend_map == before


RANK = textwrap.dedent(
    """
    import json, sys, torch, torch.distributed as dist
    import accel.process_group
    accel.process_group.make_default()
    dist.init_process_group()  # no backend: torch's map decides
    t = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()
    result = {"config": str(dist.get_backend_config()), "sum": t[0].item(),
              "grad": model.module.bias.grad.item()}
    # A file per rank: lines the ranks print at once can interleave.
    with open(f"{sys.argv[1]}/rank{dist.get_rank()}.json", "w") as out:
        json.dump(result, out)
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_init_process_group_without_a_backend_uses_accel_after_make_default(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "accel", "run", "--standalone", "--nproc-per-node=2", str(script),
         str(tmp_path)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*.json"))]
    assert ranks == [{"config": "cpu:accel", "sum": 3.0, "grad": 2.0}] * 2
