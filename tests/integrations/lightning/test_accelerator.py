"""``AccelAccelerator`` and its helpers, in this process, against Lightning's own contracts."""

from __future__ import annotations

import functools
import re
from typing import Any

import lightning
import lightning.fabric.accelerators as fabric_accelerators
import lightning.fabric.strategies as fabric_strategies
import lightning.pytorch.accelerators as trainer_accelerators
import lightning.pytorch.strategies as trainer_strategies
import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from lightning.fabric.plugins.precision import MixedPrecision
from typing_extensions import override

import accel
import accel.integrations.lightning as accel_lightning
from accel.backends.cpu import CPUAccelerator
from accel.integrations.lightning import _devices, _precision, _strategies


class _Devices:
    """What parse_devices asks a backend: its device type and how many it has."""

    def __init__(self, device_type: str, count: int) -> None:
        self.type, self.count = device_type, count

    def device(self, index: int | None = None) -> torch.device:
        return torch.device(self.type, index)

    def device_count(self) -> int:
        return self.count


def test_accel_and_its_strategies_are_registered_with_fabric_and_the_trainer() -> None:
    for registry in (
        fabric_accelerators.ACCELERATOR_REGISTRY,
        trainer_accelerators.AcceleratorRegistry,
    ):
        assert registry["accel"]["accelerator"] is accel_lightning.AccelAccelerator
    assert isinstance(
        fabric_strategies.STRATEGY_REGISTRY.get("accel_ddp"), fabric_strategies.DDPStrategy
    )
    assert isinstance(
        trainer_strategies.StrategyRegistry.get("accel_ddp"), trainer_strategies.DDPStrategy
    )
    single = fabric_strategies.STRATEGY_REGISTRY.get("accel_single_device")
    assert single.root_device == accel.get_accelerator().device()
    accel_lightning.register()  # idempotent
    assert (
        fabric_accelerators.ACCELERATOR_REGISTRY["accel"]["accelerator"]
        is accel_lightning.AccelAccelerator
    )


def test_the_accelerator_answers_from_the_selected_backend() -> None:
    acc = accel.get_accelerator()
    lightning_accelerator = accel_lightning.AccelAccelerator
    assert lightning_accelerator.name() == "accel"
    assert lightning_accelerator.is_available() == acc.is_available()
    assert lightning_accelerator.auto_device_count() == acc.device_count()
    assert lightning_accelerator.get_parallel_devices(3) == [acc.device()] * 3


def test_device_stats_of_a_device_the_backend_does_not_have_are_refused() -> None:
    acc = accel.get_accelerator()
    other = "meta" if acc.device().type != "meta" else "cpu"
    with pytest.raises(ValueError, match=f"device '{other}:0' is not of accel's backend"):
        accel_lightning.AccelAccelerator().get_device_stats(f"{other}:0")
    with pytest.raises(ValueError, match=f"device index {acc.device_count()} is out of range"):
        accel_lightning.AccelAccelerator().get_device_stats(acc.device_count())


@pytest.mark.parametrize("api", ["fabric", "trainer"])
def test_the_single_device_strategy_takes_the_device_named_or_the_current_one(api: str) -> None:
    make: Any = (
        lightning.Fabric if api == "fabric" else functools.partial(lightning.Trainer, logger=False)
    )
    device_type = accel.get_accelerator().device().type
    for devices in (1, 2, "auto"):  # several: the current device, as Lightning's own
        strategy = make(accelerator="accel", devices=devices, strategy="accel_single_device")
        assert strategy.strategy.root_device.type == device_type


class _OnDevice(CPUAccelerator):
    """The CPU backend, claiming another device type (all check_strategy asks)."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type_claimed = device_type

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device(self.device_type_claimed, device_index)


@pytest.mark.usefixtures("fresh_selection")
@pytest.mark.parametrize(
    ("device_type", "refused"), [("xpu", True), ("hpu", True), ("cuda", False), ("cpu", False)]
)
def test_lightnings_ddp_is_refused_on_devices_whose_stream_is_not_cudas(
    device_type: str, refused: bool
) -> None:
    # Lightning's DDP creates a torch.cuda.Stream for any device but the CPU: right on
    # CUDA (where refusing it removed ddp_spawn and ddp_notebook), wrong elsewhere.
    accel.set_accelerator(_OnDevice(device_type))
    for strategy in (
        fabric_strategies.DDPStrategy(),
        trainer_strategies.DDPStrategy(start_method="spawn"),
    ):
        if refused:
            with pytest.raises(ValueError, match=r"creates a torch\.cuda\.Stream.*'accel_ddp'"):
                _strategies.check_strategy(strategy, "here")
        else:
            _strategies.check_strategy(strategy, "here")
    for ours in (fabric_strategies.STRATEGY_REGISTRY.get("accel_ddp"),
                 trainer_strategies.StrategyRegistry.get("accel_ddp")):  # fmt: skip
        _strategies.check_strategy(ours, "here")


def test_fabric_refuses_dp_on_the_cpu_backend_naming_ddp() -> None:
    # DataParallel has nothing to split over on the CPU: one process ran, devices=2 dropped.
    if accel.get_accelerator().device().type != "cpu":
        pytest.skip("Lightning's 'dp' is DataParallel over the backend's devices")
    with pytest.raises(ValueError, match=r"'dp' \(DataParallel\).*pass strategy='ddp'"):
        lightning.Fabric(accelerator="accel", devices=2, strategy="dp")


def test_fabric_refuses_ddp_spawn_on_the_cpu_backend_naming_ddp() -> None:
    # mp.spawn shares a module passed to launch(); Lightning gives it private memory back
    # only for its "cpu" accelerator: every rank's optimizer stepped the same parameters.
    if accel.get_accelerator().device().type != "cpu":
        pytest.skip("spawned processes share CPU tensors only")
    with pytest.raises(ValueError, match=r"mp\.spawn \('ddp_spawn'\).*pass strategy='ddp'"):
        lightning.Fabric(accelerator="accel", devices=2, strategy="ddp_spawn")


def test_device_stats_are_the_backends_memory_numbers() -> None:
    acc = accel.get_accelerator()
    keep = torch.empty(1 << 20, device=acc.device())
    stats = accel_lightning.AccelAccelerator().get_device_stats(acc.device())
    assert stats["total_bytes"] == acc.total_memory()
    assert 0 < stats["available_bytes"] <= stats["total_bytes"]
    assert set(acc.memory_stats()) <= set(stats)
    assert all(isinstance(value, int) for value in stats.values())
    del keep


@pytest.mark.parametrize(("given_devices", "expected"), [(1, 1), (3, 3), ("2", 2), (" 4 ", 4)])
def test_cpu_devices_are_a_process_count(given_devices: Any, expected: int) -> None:
    assert _devices.parse_devices(_Devices("cpu", 1), given_devices) == expected


@pytest.mark.parametrize(
    "bad", [0, -1, "0", [0], "0,1", True, 1.5, None, "two", "--1", "\u00b2", "-\u00b2"]
)  # "²" is a digit to str.isdigit, not to int()
def test_bad_cpu_devices_name_the_value(bad: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"devices={bad!r}")):
        _devices.parse_devices(_Devices("cpu", 1), bad)


@pytest.mark.parametrize(
    ("given_devices", "expected"),
    [(1, [0]), (3, [0, 1, 2]), (-1, [0, 1, 2, 3]), ("-1", [0, 1, 2, 3]), ("1,3", [1, 3]),
     ([2, 0], [2, 0]), ((3,), [3])],
)  # fmt: skip
def test_device_backend_devices_are_indices(given_devices: Any, expected: list[int]) -> None:
    assert _devices.parse_devices(_Devices("xpu", 4), given_devices) == expected


@pytest.mark.parametrize("bad", [0, 5, -2, [4], [0, 0], [], [True], "1,x", "", 2.0])
def test_bad_device_indices_name_the_value(bad: Any) -> None:
    with pytest.raises(ValueError, match="devices="):
        _devices.parse_devices(_Devices("xpu", 4), bad)


@given(count=st.integers(1, 16), wanted=st.integers(-3, 20))
def test_an_int_gives_the_first_devices_or_an_error(count: int, wanted: int) -> None:
    backend = _Devices("xpu", count)
    if wanted == -1 or 0 < wanted <= count:
        assert _devices.parse_devices(backend, wanted) == list(
            range(count if wanted == -1 else wanted)
        )
    else:
        with pytest.raises(ValueError, match=f"devices={wanted}"):
            _devices.parse_devices(backend, wanted)


def test_a_device_of_another_type_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="strategy='accel_single_device'"):
        accel_lightning.AccelAccelerator().setup_device(torch.device("meta"))


@pytest.mark.usefixtures("default_backend_map")
def test_setup_device_makes_the_backends_library_ddps_default_until_teardown() -> None:
    acc = accel.get_accelerator()
    before = dist.Backend.default_device_backend_map["cpu"]
    lightning_accelerator = accel_lightning.AccelAccelerator()
    lightning_accelerator.setup_device(torch.device("cpu"))
    assert dist.Backend.default_device_backend_map["cpu"] == acc.communication_backend_name()
    lightning_accelerator.teardown()
    assert dist.Backend.default_device_backend_map["cpu"] == before


def test_a_backend_library_that_does_not_declare_the_device_is_named_per_device() -> None:
    class Backend(_Devices):
        def __init__(self, library: str) -> None:
            super().__init__("accelfake", 1)
            self.library = library

        def communication_backend_name(self) -> str:
            return self.library

    assert _devices.process_group_backend(Backend("gloo"), "cpu") == "gloo"  # type: ignore[arg-type]
    assert (
        _devices.process_group_backend(Backend("gloo"), "accelfake")  # type: ignore[arg-type]
        == "cpu:gloo,accelfake:gloo"
    )


class _DTypes:
    def __init__(self, bf16: bool, fp16: bool) -> None:
        self.bf16, self.fp16 = bf16, fp16

    def is_bf16_supported(self) -> bool:
        return self.bf16

    def is_fp16_supported(self) -> bool:
        return self.fp16

    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32]

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("xpu", index)


@pytest.mark.parametrize(
    "make", [accel_lightning.fabric_precision, accel_lightning.trainer_precision]
)
def test_mixed_precision_follows_the_dtype_api(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_precision, "get_accelerator", lambda: _DTypes(bf16=True, fp16=False))
    plugin = make("bf16-mixed")
    assert plugin.device == "xpu"
    assert plugin.precision == "bf16-mixed"
    with pytest.raises(ValueError, match="does not support float16"):
        make("16-mixed")
    with pytest.raises(ValueError, match="'32-true': expected one of"):
        make("32-true")


class _NoAutocast(_DTypes):
    @override
    def device(self, index: int | None = None) -> torch.device:
        return torch.device("meta", index)


@pytest.mark.parametrize(
    "make", [accel_lightning.fabric_precision, accel_lightning.trainer_precision]
)
def test_mixed_precision_refuses_a_device_torch_cannot_autocast_on(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Accepted, the plugin failed at the first autocast() in the training loop.
    monkeypatch.setattr(_precision, "get_accelerator", lambda: _NoAutocast(bf16=True, fp16=True))
    with pytest.raises(ValueError, match="'bf16-mixed': torch cannot autocast on 'meta' devices"):
        make("bf16-mixed")


def test_fabric_refuses_mixed_precision_for_another_device_when_constructed() -> None:
    # Fabric autocast on "cuda" for accelerator="accel" and cast the inputs to bf16: the
    # first forward failed in F.linear ("mat1 and mat2 must have the same dtype").
    device_type = accel.get_accelerator().device().type
    if device_type == "cuda":
        pytest.skip("Lightning's default autocast device is right on a CUDA backend")
    expected = (
        rf"^Fabric\(accelerator='accel'\): its mixed precision autocasts on 'cuda', but "
        rf"accel's backend runs on '{device_type}' .*"
        rf"plugins=\[accel\.integrations\.lightning\.fabric_precision\('bf16-mixed'\)\]$"
    )
    with pytest.raises(ValueError, match=expected):
        lightning.Fabric(accelerator="accel", devices=1, precision="bf16-mixed")
    with pytest.raises(ValueError, match=expected):
        lightning.Fabric(
            accelerator=accel_lightning.AccelAccelerator(),
            devices=1,
            plugins=[MixedPrecision("bf16-mixed", device="cuda")],
        )
    accel_lightning.register()  # idempotent: Fabric.__init__ is wrapped once
    wrapped: Any = lightning.Fabric.__init__
    assert not hasattr(wrapped.__wrapped__, "__wrapped__")
    fabric = lightning.Fabric(
        accelerator="accel", devices=1, plugins=[accel_lightning.fabric_precision("bf16-mixed")]
    )
    model = fabric.setup(torch.nn.Linear(4, 2))
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).to(fabric.device)
    with torch.autocast(device_type, dtype=torch.bfloat16):
        reference = model.module(x).float()
    assert reference.dtype == model(x).dtype == torch.float32  # Fabric converts outputs back
    assert torch.equal(model(x), reference)
    assert not torch.equal(model(x), model.module(x))  # it did autocast
