"""The kernels' instruction-set levels: ACCEL_CPU_ISA caps them, a bad value is an error
naming it, and the native tests pass at every level this CPU runs (the main run covers its
best level; each lower one runs here in a process capped at it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accel.ops import isa

ROOT = Path(__file__).resolve().parents[2]

# The tests that run native arithmetic: the optimizer kernels and conversions (every 16-bit
# pattern), and the shared-memory sums against gloo, bit for bit.
NATIVE_TESTS = [
    "tests/ops/test_cpu_optim.py",
    "tests/optim",
    "tests/comm/test_collectives.py::test_sums_match_gloo_bitwise_under_either_launcher[torchrun]",
    "tests/comm/test_collectives.py::test_three_ranks_hold_identical_bits_within_the_summation_bound",
]


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != isa.ENV} | env
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, env=environment, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip


def _cpu_level() -> str:
    from accel.ops import _cpu_optim

    return _cpu_optim.cpu_isa()


def _below_cpu(level: str) -> bool:
    return isa.LEVELS.index(level) < isa.LEVELS.index(_cpu_level())


def test_unset_or_empty_means_no_cap() -> None:
    assert isa.requested({}) is None
    assert isa.requested({isa.ENV: ""}) is None
    for level in isa.LEVELS:
        assert isa.requested({isa.ENV: level}) == level


@pytest.mark.parametrize("value", ["avx2", "X86-64-V3", "x86-64-v2", " baseline", "v4"])
def test_a_bad_value_is_an_error_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match=rf"ACCEL_CPU_ISA is '{value}'; expected one of baseline"):
        isa.requested({isa.ENV: value})


def test_this_process_runs_the_cpus_best_level_or_the_cap() -> None:
    cap = isa.requested()
    assert isa.active() == (cap if cap is not None and _below_cpu(cap) else _cpu_level())
    assert isa.describe().startswith(str(isa.active()))


@pytest.mark.slow
@pytest.mark.parametrize("level", isa.LEVELS)
def test_the_cap_sets_the_level_of_both_extensions(level: str) -> None:
    # A cap at or above the CPU's level leaves the CPU's; below it, the cap wins.
    expected = level if _below_cpu(level) else _cpu_level()
    result = _python(
        "from accel.ops import _cpu_optim, _shm_comm, isa;"
        "print(_cpu_optim.isa(), _shm_comm.isa(), isa.describe(), sep='|')",
        ACCEL_CPU_ISA=level,
    )
    assert result.returncode == 0, result.stderr
    optim_level, comm_level, description = result.stdout.strip().split("|")
    assert (optim_level, comm_level) == (expected, expected)
    assert ("capped by ACCEL_CPU_ISA" in description) == _below_cpu(level)


@pytest.mark.slow
def test_a_bad_value_fails_the_import_in_python_and_in_the_extension() -> None:
    through_accel = _python("import accel.ops.cpu_optim", ACCEL_CPU_ISA="avx512")
    assert through_accel.returncode != 0
    assert "ValueError: ACCEL_CPU_ISA is 'avx512'; expected one of" in through_accel.stderr
    # An extension loaded on its own (accel.ops, and its check, never imported) checks again.
    from accel.ops import _cpu_optim

    direct = _python(
        "import importlib.machinery, importlib.util, sys;"
        "loader = importlib.machinery.ExtensionFileLoader('_cpu_optim', sys.argv[1]);"
        "spec = importlib.util.spec_from_file_location('_cpu_optim', sys.argv[1], loader=loader);"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec));"
        "assert 'accel.ops' not in sys.modules",
        _cpu_optim.__file__,
        ACCEL_CPU_ISA="avx512",
    )
    assert direct.returncode != 0
    assert "ImportError: ACCEL_CPU_ISA is 'avx512'; expected one of baseline" in direct.stderr
    # Choosing a backend, and the report, say what is wrong: not "no backend is available".
    chosen = _python("import accel; accel.get_accelerator()", ACCEL_CPU_ISA="avx512")
    assert "ValueError: ACCEL_CPU_ISA is 'avx512'; expected one of" in chosen.stderr
    assert "no accelerator backend" not in chosen.stderr
    report = _python("from accel.cli import main; raise SystemExit(main(['report']))",
                     ACCEL_CPU_ISA="avx512")  # fmt: skip
    assert report.returncode == 2
    assert report.stderr.splitlines() == [
        "accel: error: ACCEL_CPU_ISA is 'avx512'; expected one of baseline, x86-64-v3, "
        "x86-64-v4 (or unset)"
    ]


# Set after accel.ops is imported (its own check passed) and before the kernels' first use,
# which loads them: each path said "not built" instead (an ImportError, None, a builder's
# "reinstall accel"), what callers take for a missing build and quietly fall back from.
_SET_AFTER_IMPORT = r"""
import importlib.util, os, sys
import torch
import accel
from accel.comm import _segment
from accel.ops import isa, step_channel
from accel.ops.prebuilt import CPUAdamBuilder, ShareMemCommBuilder
from accel.optim import CPUAdam

with_deepspeed = sys.argv[1] == "deepspeed"
if with_deepspeed:  # its import asks for the collectives, which loads accel.ops._shm_comm
    os.environ["DS_ACCELERATOR"] = "cpu"
    from accel.integrations import deepspeed as accel_deepspeed
    accel_deepspeed.install()
    from deepspeed.accelerator import get_accelerator
os.environ["ACCEL_CPU_ISA"] = "avx512"
param = torch.nn.Parameter(torch.zeros(4))
param.grad = torch.ones(4)
calls = {
    "active": isa.active, "describe": isa.describe, "step": CPUAdam([param]).step,
    "channel": step_channel.channel_bytes, "load": CPUAdamBuilder().load,
}
if with_deepspeed:
    deepspeeds = get_accelerator().create_op_builder("CPUAdamBuilder")
    calls["deepspeed load"] = deepspeeds.load
    print("deepspeed compatible", deepspeeds.is_compatible(), deepspeeds.incompatibility_reason())
else:
    calls["comm load"] = ShareMemCommBuilder().load
    calls["collectives"] = accel.get_accelerator().communication_backend_name
    calls["summable"] = _segment.summable_codes
for name, call in calls.items():
    try:
        print(name, "returned", call())
    except Exception as error:
        print(name, type(error).__name__, error)
print("compatible", CPUAdamBuilder().is_compatible(), CPUAdamBuilder().incompatibility_reason())
print("loaded", sorted(m for m in sys.modules if m in isa.NATIVE_MODULES))
"""


@pytest.mark.slow
@pytest.mark.parametrize("first", ["accel", "deepspeed"])
def test_a_bad_value_set_before_the_kernels_load_is_the_error_naming_it(first: str) -> None:
    if first == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed")
    result = _python(_SET_AFTER_IMPORT, first)
    assert result.returncode == 0, result.stderr
    error = "ACCEL_CPU_ISA is 'avx512'; expected one of baseline, x86-64-v3, x86-64-v4 (or unset)"
    lines = result.stdout.splitlines()
    calls = ["active", "describe", "step", "channel", "load"]
    if first == "deepspeed":
        calls.append("deepspeed load")
        assert f"deepspeed compatible False {error}" in lines
        assert "loaded ['accel.ops._shm_comm']" in lines  # DeepSpeed's import asked for it
    else:
        calls += ["comm load", "collectives", "summable"]  # these fell back to gloo quietly
        assert "loaded []" in lines  # the extensions never began to load
    for call in calls:
        assert f"{call} ValueError {error}" in lines, result.stdout
    assert f"compatible False {error}" in lines


@pytest.mark.slow
def test_the_report_names_the_level() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accel", "report"],
        capture_output=True, text=True, timeout=120, check=False,
        env=os.environ | {"CUDA_VISIBLE_DEVICES": ""},  # keeps any ACCEL_CPU_ISA this run has
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"cpu kernels: {isa.describe()}" in result.stdout


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.parametrize("level", ["x86-64-v3", "baseline"])
def test_the_native_tests_pass_at_each_lower_level(level: str) -> None:
    if not _below_cpu(level):
        pytest.skip(f"this CPU's best level is {_cpu_level()}: the main run covers it")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *NATIVE_TESTS],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT,
        env=os.environ | {isa.ENV: level},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.splitlines()[-1]
    assert " passed" in summary
    assert "skipped" not in summary
