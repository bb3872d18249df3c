"""``accel spec transformers``: transformers' device-agnostic helpers dispatch to accel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import accel
from accel.cli import main
from accel.integrations.transformers import HOOKS, render_spec, spec_accelerator
from tests.support import ROOT, TESTS

CHECK = TESTS / "integrations" / "transformers_spec_check.py"


class _SeedsAndCountsOnly:
    """A stand-in with some of the members the hooks call."""

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("cpu")

    def manual_seed(self, seed: int) -> None: ...

    def device_count(self) -> int:
        return 1


def _spec_namespace(text: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(text, "accel_spec.py", "exec"), namespace)
    return namespace


def test_every_hook_calls_the_selected_backend() -> None:
    acc = accel.get_accelerator()
    namespace = _spec_namespace(render_spec())
    assert namespace["DEVICE_NAME"] == acc.device().type
    for hook in HOOKS:
        if hook.name == "DEVICE_COUNT_FN" and acc.device().type == "cpu":
            assert hook.name not in namespace  # transformers' own 0 for the CPU
            continue
        assert namespace[hook.name] == getattr(acc, hook.member), hook.name


def test_a_hook_the_backend_cannot_back_is_left_out_not_faked() -> None:
    text = render_spec(_SeedsAndCountsOnly())  # type: ignore[arg-type]
    assert "MANUAL_SEED_FN = _accelerator.manual_seed" in text
    assert "# EMPTY_CACHE_FN: left out, the backend has no empty_cache()" in text
    assert "# SYNCHRONIZE_FN: left out, the backend has no synchronize()" in text
    assert "\nEMPTY_CACHE_FN =" not in text


def test_a_spec_for_another_device_type_refuses_to_load() -> None:
    with pytest.raises(ValueError, match="written for 'npu' devices, but accel selected"):
        spec_accelerator("npu")


def test_the_cli_writes_the_spec_and_refuses_a_name_transformers_cannot_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["spec", "transformers", "-o", "accel_spec.py"]) == 0
    assert (tmp_path / "accel_spec.py").read_text() == render_spec()
    assert main(["spec", "transformers", "-o", "accel-spec.py"]) == 2
    assert (
        "--output 'accel-spec.py': expected a file name like accel_spec.py"
        in capsys.readouterr().err
    )
    assert main(["spec", "transformers"]) == 0
    assert capsys.readouterr().out == render_spec()


@pytest.mark.parametrize("name", ["json.py", "torch.py", "accel.py"])
def test_the_cli_refuses_a_name_that_would_shadow_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # Accepted, json.py shadowed the standard library's json for everything run there:
    # `accel report` itself failed in that directory.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m` puts the directory first
    assert main(["spec", "transformers", "-o", name]) == 2
    said = capsys.readouterr().err
    assert f"--output {name!r}: {name[:-3]!r} is a module Python already finds" in said
    assert not (tmp_path / name).exists()
    assert main(["spec", "transformers", "-o", "accel_spec.py"]) == 0
    assert main(["spec", "transformers", "-o", "accel_spec.py"]) == 0  # its own file again


def test_the_cli_refuses_to_replace_a_file_it_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A user's own mytrain.py, named by mistake (found on sys.path as itself), was
    # replaced by the spec.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = tmp_path / "mytrain.py"
    mine.write_text("print('my training')\n")
    assert main(["spec", "transformers", "-o", "mytrain.py"]) == 2
    assert "--output 'mytrain.py' exists and is not a spec" in capsys.readouterr().err
    assert mine.read_text() == "print('my training')\n"


WRITE_FAKE_SPEC = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {support!r})
    import fake_device
    fake_device.install("accelfake")
    from accel.integrations.transformers import render_spec
    open("accel_spec.py", "w").write(render_spec())
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_TEST_DEVICE_SPEC="accel_spec.py", **extra)  # fmt: skip
    return env


def _check(tmp_path: Path, *args: str, **extra: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(CHECK), "out.json", *args], cwd=tmp_path, env=_env(**extra),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    answer: dict[str, Any] = json.loads((tmp_path / "out.json").read_text())
    return answer


@pytest.mark.slow
def test_transformers_helpers_dispatch_to_accel_on_the_cpu(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "accel", "spec", "transformers", "-o", "accel_spec.py"],
        cwd=tmp_path, env=_env(), check=True, timeout=120,
    )  # fmt: skip
    # Two rank slots (LOCAL_SIZE), as on a two-socket host: accel counts 2 CPU devices,
    # which ran transformers' multi-accelerator tests on the CPU.
    answer = _check(tmp_path, LOCAL_SIZE="2")
    assert answer["device"] == "cpu"
    assert answer["seed_hook_is_accel"]
    assert answer["empty_cache_hook_is_accel"]
    assert (answer["device_count"], answer["accel_device_count"]) == (0, 2)
    # transformers' accelerator decorators skip on the CPU, as they do without a spec.
    assert answer["suite"] == {"ran": [], "skipped": 3, "failures": []}
    assert answer["model_differences"] == {"bert": 0.0, "gpt2": 0.0}


@pytest.mark.slow
def test_transformers_helpers_dispatch_to_accel_on_a_fake_device(tmp_path: Path) -> None:
    code = WRITE_FAKE_SPEC.format(support=str(TESTS / "support"))
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), check=True, timeout=120)
    answer = _check(tmp_path, "--fake", "accelfake")
    assert answer["device"] == "accelfake"
    assert answer["seed_hook_is_accel"]
    assert answer["empty_cache_hook_is_accel"]
    assert answer["device_count"] == answer["accel_device_count"] == 2
    # The spec's memory hook reads the fake device's own count (it holds a 4 MiB tensor).
    assert answer["spec_memory_allocated"] == answer["accel_memory_allocated"] >= 4 << 20
    assert answer["suite"] == {"ran": ["cache", "multi", "seed"], "skipped": 0, "failures": []}
    differences = answer["model_differences"]
    assert set(differences) == {"bert", "gpt2"}
    assert all(difference < 1e-5 for difference in differences.values())


def test_an_output_that_cannot_be_written_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel import cli

    target = tmp_path / "missing" / "accel_spec.py"
    assert cli.main(["spec", "transformers", "-o", str(target)]) == 2
    said = capsys.readouterr().err
    assert f"accel spec: --output {str(target)!r}: cannot write it: No such file" in said
