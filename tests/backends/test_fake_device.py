"""The conformance kit over the torch-device backends, on a working fake device.

``tests/support/fake_device.py`` turns torch's PrivateUse1 slot into a CPU-backed device, so the
code every torch device shares (``TorchDeviceBackend`` and its mixins, the discovered
composition, the named-device classes) is checked in CI as it would be on XPU, NPU or a
device accel has never seen. Each case runs in a fresh interpreter: renaming PrivateUse1
is once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.support import TESTS

# Every test here starts other processes (ranks, launchers, CLIs): `-m "not slow"`
# leaves them out for a quick run.
pytestmark = pytest.mark.slow


SUPPORT = TESTS / "support"  # fake_device.py is imported from there

KIT = textwrap.dedent(
    """
    import json, sys, types
    sys.path.insert(0, {tests!r})
    import torch, torch.distributed as dist
    import fake_device
    {prepare}
    fake_device.install({device!r})
    from accel.backends.devices import {backend}
    from accel.testing import check_backend
    from accel.protocols import GraphAPI, StreamAPI

    acc = {backend}()
    report = check_backend(acc, max_examples=8)
    # Real code on the device: a few SGD steps of a small model.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = model.to(acc.current_device_name())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 8, device=acc.current_device_name())
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    print(json.dumps({{
        "ok": report.ok, "report": str(report), "protocols": report.protocols,
        "device": str(x.device), "streams": isinstance(acc, StreamAPI),
        "graphs": isinstance(acc, GraphAPI), "losses": losses,
    }}))
    """
)

# torch_npu registers itself and its collectives library on import; the stand-in does the
# same, so NPUAccelerator's probe, its runtime import and its "hccl" are exercised.
FAKE_TORCH_NPU = textwrap.dedent(
    """
    sys.modules["torch_npu"] = types.ModuleType("torch_npu")
    dist.Backend.register_backend(
        "hccl", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size),
        devices=["npu"],
    )
    """
)


def _check(device: str, backend: str, prepare: str = "") -> dict[str, object]:
    code = KIT.format(tests=str(SUPPORT), device=device, backend=backend, prepare=prepare)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize(
    ("device", "backend", "prepare"),
    [
        ("accelfake", "PrivateUse1Accelerator", ""),
        ("npu", "NPUAccelerator", FAKE_TORCH_NPU),
    ],
    ids=["privateuse1", "npu"],
)
def test_torch_device_backends_pass_the_kit_on_a_fake_device(
    device: str, backend: str, prepare: str
) -> None:
    answer = _check(device, backend, prepare)
    # The one promise this fake cannot keep: torch's Python PrivateUse1 hooks offer no
    # pinned-memory allocator (a real device runtime registers one), and the kit says so
    # through accel's error rather than passing a pin_memory() that cannot pin.
    report = str(answer["report"])
    assert "1 violation(s)" in report, report
    assert (
        "TensorAPI.on_accelerator/pin_memory/is_pinned: raised RuntimeError: pin_memory(): "
        "this device's torch runtime provides no page-locked host memory" in report
    ), report
    assert set(answer["protocols"]) >= {  # type: ignore[arg-type]
        "DeviceAPI", "RNGAPI", "MemoryAPI", "DTypeAPI", "TensorAPI", "RuntimeAPI",
    }  # fmt: skip
    assert answer["device"] == f"{device}:0"
    # The fake module has no streams or graphs, so the composed backend claims neither.
    assert answer["streams"] is False
    assert answer["graphs"] is False
    losses = answer["losses"]
    assert isinstance(losses, list)
    assert losses[-1] < losses[0] / 2  # the model trained on the device


REPORT_WITH_A_FAILING_CONSTRUCTOR = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import fake_device
    fake_device.install("accelfake")
    from accel.backends.devices import PrivateUse1Accelerator

    def broken_init(self):
        raise RuntimeError("driver went away")

    PrivateUse1Accelerator.__init__ = broken_init
    import accel
    from accel import report
    print(type(accel.get_accelerator()).__name__)
    row = {{row.name: row for row in report.collect().backends}}["privateuse1"]
    print(row.reason)
    print(row.capabilities["StreamAPI"])
    """
)


@pytest.mark.slow  # starts an interpreter
def test_the_report_survives_a_device_backend_whose_constructor_fails() -> None:
    # The report made the backend again to read its capabilities, and died of the same error.
    code = REPORT_WITH_A_FAILING_CONSTRUCTOR.format(tests=str(SUPPORT))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-3:] == [
        "CPUAccelerator",
        "2 device(s); then its constructor raised RuntimeError: driver went away",
        "None",
    ]
