"""ZenFlow's cross-process Adam (``zenflow_adam_*`` of DeepSpeed's ``cpu_adam`` module),
prebuilt: a spawned optimizer process driven through shared memory, as DeepSpeed's
``zenflow_utils.start_optimizer_process`` drives it (scripts/zenflow_steps.py)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest
import torch

from accel.integrations.deepspeed.kernels import CPUAdamKernels
from tests.integrations.deepspeed.processes import SCRIPTS, assert_no_jit, fresh_env, last_json
from tests.support import ROOT

STEPS = SCRIPTS / "zenflow_steps.py"


def _run(tmp_path: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(STEPS), *args], env=fresh_env(tmp_path, **env), cwd=ROOT,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _all_equal(result: dict[str, Any]) -> bool:
    equal = result["equal"]
    return all(equal["param"] + equal["exp_avg"] + equal["exp_avg_sq"]) and equal["stale"]


@pytest.mark.slow  # starts processes
def test_steps_in_the_optimizer_process_equal_adam_update_bit_for_bit(
    tmp_path: pathlib.Path,
) -> None:
    # Two groups with their own hyper-parameters (one without bias correction, one with
    # no stale buffer), L2 decay, alternating buffers, the next step queued while the
    # previous runs: every tensor equals a sequential adam_update on copies.
    result = last_json(_run(tmp_path, "exact"))
    assert result["no_step_pending"] is False  # a wait with nothing submitted times out
    assert result["changed"] == [True, True]
    assert _all_equal(result), result["equal"]
    assert result["worker_exit"] == 0  # returned on the exit command


@pytest.mark.slow  # starts processes
def test_through_deepspeeds_builder_nothing_is_built(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("deepspeed")
    result = last_json(_run(tmp_path, "exact", "--deepspeed", ACCEL_DEEPSPEED="1"))
    assert _all_equal(result), result["equal"]
    assert result["worker_exit"] == 0
    assert_no_jit(tmp_path)


@pytest.mark.slow  # starts processes
def test_a_failing_step_is_raised_in_the_training_process(tmp_path: pathlib.Path) -> None:
    # DeepSpeed's worker dies and the training process learns it from a 60 s liveness
    # poll; here the wait raises the worker's error at once.
    result = last_json(_run(tmp_path, "fail"))
    assert result["error"] == (
        "the optimizer worker failed: step 1, group 0: ValueError: params[0] and grads[0] "
        "overlap in memory; each tensor needs its own storage"
    )
    assert result["worker_exit"] == 1


@pytest.mark.slow  # starts processes
def test_an_orphaned_worker_stops(tmp_path: pathlib.Path) -> None:
    result = _run(tmp_path, "orphan")
    worker = int(json.loads(result.stdout.strip().splitlines()[-1])["worker"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if psutil.Process(worker).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    else:
        psutil.Process(worker).kill()
        pytest.fail("the worker outlived the training process by 30 s")


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"grad1": torch.zeros(9)}, ValueError, "grad1 has 9 elements, param 8"),
        ({"exp_avg0": torch.zeros(8, dtype=torch.int32)}, TypeError, "exp_avg0 must be float32"),
        ({"exp_avg_sq1": torch.zeros(8, device="meta")}, ValueError, "exp_avg_sq1 must be a contiguous CPU tensor"),
        ({"grad0": torch.zeros(16)[::2]}, ValueError, "grad0 must be a contiguous CPU tensor"),
        ({"stale": torch.zeros(8, dtype=torch.bfloat16)}, TypeError, "stale must have param's dtype"),
        ({"param": [0.0] * 8}, TypeError, "param must be a torch.Tensor, got list"),
    ],
)  # fmt: skip
def test_a_bad_group_is_refused_when_registered(
    change: dict[str, object], error: type[Exception], message: str
) -> None:
    op = CPUAdamKernels()
    handle = op.zenflow_adam_create(0, [0, 1])
    group: dict[str, Any] = {
        name: torch.zeros(8)
        for name in ("param", "grad0", "grad1", "exp_avg0", "exp_avg1", "exp_avg_sq0", "exp_avg_sq1")
    }  # fmt: skip
    group["stale"] = None
    group.update(change)
    with pytest.raises(error, match=message):
        op.zenflow_adam_register_group(handle, **group)


def test_handles_and_lists_are_checked() -> None:
    op = CPUAdamKernels()
    with pytest.raises(KeyError, match="no ZenFlow Adam with handle 5"):
        op.zenflow_adam_run_worker(5, 1 << 20)
    with pytest.raises(ValueError, match="zf_affinity must list core numbers"):
        op.zenflow_adam_create(0, [-1])
    ctrl = torch.zeros(op.zenflow_adam_ctrl_size(), dtype=torch.uint8)
    op.zenflow_adam_ctrl_init(ctrl.data_ptr(), 1)
    with pytest.raises(ValueError, match="one entry per group in every list"):
        op.zenflow_adam_submit(ctrl.data_ptr(), 0, 1, [1e-3], [0.9], [0.999], [1e-8], [0.0], [])
    with pytest.raises(ValueError, match="no channel at address"):
        op.zenflow_adam_wait(
            torch.zeros(op.zenflow_adam_ctrl_size(), dtype=torch.uint8).data_ptr(), 0
        )
    handle = op.zenflow_adam_create(0, [])
    op.zenflow_adam_destroy(handle)
    with pytest.raises(KeyError):
        op.zenflow_adam_register_group(handle, *[torch.zeros(1)] * 7, None)


@pytest.mark.slow  # starts an interpreter
def test_the_module_imports_where_the_extension_was_not_built() -> None:
    # The DeepSpeed integration imports this module; a platform without accel's compiled
    # kernels must still import it, and a ZenFlow call then says what is missing.
    code = (
        "import sys; sys.modules['accel.ops._cpu_optim'] = None\n"
        "from accel.integrations.deepspeed.kernels import CPUAdamKernels\n"
        "try:\n"
        "    CPUAdamKernels().zenflow_adam_ctrl_size()\n"
        "except ImportError as error:\n"
        "    print('ImportError', error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("ImportError"), result.stdout
