"""Strategies for device backends, where Lightning's assume CUDA.

Lightning's single-device strategy defaults to the CPU, and its DDP strategies wrap the
model on a fresh ``torch.cuda.Stream`` whenever the device is not the CPU. These
subclasses take the device from accel and the stream from the backend's StreamAPI (none
on a synchronous device); the rest is Lightning's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any

import lightning.fabric.strategies as fabric_strategies
import lightning.pytorch.strategies as trainer_strategies
import torch
from lightning.fabric.strategies.ddp import DDPStrategy as FabricDDPBase
from lightning.fabric.strategies.deepspeed import DeepSpeedStrategy as FabricDeepSpeedStrategy
from lightning.fabric.strategies.dp import DataParallelStrategy
from lightning.fabric.strategies.single_device import (
    SingleDeviceStrategy as FabricSingleDeviceBase,
)
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from accel import get_accelerator
from accel.integrations.lightning._devices import current_device
from accel.protocols import supports_streams

SINGLE_DEVICE = "accel_single_device"
DDP = "accel_ddp"


@contextlib.contextmanager
def _side_stream() -> Generator[None]:
    """A side stream for DDP's set-up where the backend has streams (as torch's DDP
    notes advise for CUDA); nothing on a synchronous device."""
    acc = get_accelerator()
    if not supports_streams(acc):
        yield
        return
    with acc.stream(acc.Stream()):
        yield


def _wrap(
    module: torch.nn.Module, root: torch.device, kwargs: dict[str, Any]
) -> DistributedDataParallel:
    device_ids = None if root.type == "cpu" else [root.index]
    with _side_stream():
        return DistributedDataParallel(module=module, device_ids=device_ids, **kwargs)


class _DeviceFromDevices:
    """The device ``devices`` names, for a single-device strategy.

    Lightning hands the devices it parsed only to a strategy with ``parallel_devices`` (its
    connector sets them when they are empty): without it, ``devices=[1]`` ran on the
    current device. One device named is taken; several (``devices="auto"`` names every
    device) leave the current one, as Lightning's own single-device strategy ignores them.
    """

    _root_device: torch.device

    @property
    def parallel_devices(self) -> list[torch.device]:
        """The device Lightning gave (empty until it gave one)."""
        return [self._root_device] if getattr(self, "_given", False) else []

    @parallel_devices.setter
    def parallel_devices(self, devices: list[torch.device]) -> None:
        if len(devices) == 1:
            self._root_device = torch.device(devices[0])
        self._given = True


class FabricSingleDeviceStrategy(_DeviceFromDevices, FabricSingleDeviceBase):
    """Fabric's single-device strategy on the device ``devices`` names, by default accel's
    current device (``"accel_single_device"``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(device=current_device(), **kwargs)


class TrainerSingleDeviceStrategy(_DeviceFromDevices, trainer_strategies.SingleDeviceStrategy):
    """The Trainer's single-device strategy on the device ``devices`` names, by default
    accel's current device (``"accel_single_device"``)."""

    def __init__(self, **kwargs: Any) -> None:
        # Lightning types the accelerator parameter with a name pyright cannot resolve.
        super().__init__(device=current_device(), **kwargs)  # pyright: ignore[reportUnknownMemberType]


def _reduce(lightnings: Callable[..., Any], tensor: Any, group: Any, reduce_op: Any) -> Any:
    """``lightnings`` reduce of ``tensor``; a mean over a group whose backend for the
    tensor's device is gloo (which refuses to average integers) as the sum divided, which
    Lightning does only where the group's whole backend is named ``"gloo"`` (one device
    type's gloo among others is not)."""
    import torch.distributed as dist

    mean = isinstance(reduce_op, str) and reduce_op.lower() in ("mean", "avg")
    if not (isinstance(tensor, torch.Tensor) and mean and dist.is_initialized()):
        return lightnings(tensor, group, reduce_op)
    config = str(dist.get_backend_config(group))
    if f"{tensor.device.type}:gloo" not in config.split(","):
        return lightnings(tensor, group, reduce_op)
    summed: torch.Tensor = lightnings(tensor, group, "sum")
    world = dist.get_world_size(group)
    # As Lightning divides a gloo sum: an integer result truncated.
    return summed.div_(world) if summed.is_floating_point() else summed.copy_(summed / world)


class FabricDDPStrategy(FabricDDPBase):
    """Fabric's DDP without CUDA's stream (``"accel_ddp"``)."""

    @override
    def setup_module(self, module: torch.nn.Module) -> DistributedDataParallel:
        """Wrap ``module`` in DDP, on the backend's side stream if it has streams."""
        return _wrap(module, self.root_device, self._ddp_kwargs)

    @override
    def all_reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Fabric's, with a mean over gloo as its sum divided (see ``_reduce``)."""
        lightnings: Callable[..., Any] = super().all_reduce  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return _reduce(lightnings, tensor, group, reduce_op)


class TrainerDDPStrategy(trainer_strategies.DDPStrategy):
    """The Trainer's DDP without CUDA's stream (``"accel_ddp"``)."""

    @override
    def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
        return _wrap(model, self.root_device, self._ddp_kwargs)

    @override
    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """The Trainer's, with a mean over gloo as its sum divided (see ``_reduce``)."""
        lightnings: Callable[..., Any] = super().reduce  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return _reduce(lightnings, tensor, group, reduce_op)


def register() -> None:
    """Register both strategies with Fabric's and the Trainer's registries (idempotent)."""
    for registry, single, ddp in (
        (fabric_strategies.STRATEGY_REGISTRY, FabricSingleDeviceStrategy, FabricDDPStrategy),
        (trainer_strategies.StrategyRegistry, TrainerSingleDeviceStrategy, TrainerDDPStrategy),
    ):
        # Lightning types a registered strategy as a callable returning an unknown.
        register: Any = registry.register  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        register(SINGLE_DEVICE, single, description="one process on accel's device", override=True)
        register(DDP, ddp, description="DDP on accel's devices", override=True)


def check_strategy(strategy: object, what: str) -> None:
    """Refuse a Lightning strategy that would not run as asked on accel's backend, for
    what Lightning decides by accelerator name.

    ``what`` names who holds the strategy in the message.

    Raises:
        ValueError: ``strategy`` is Lightning's DDP on a device backend other than CUDA (it
            creates a ``torch.cuda.Stream``), or Fabric's ``"dp"`` on the CPU backend (DataParallel
            has no devices to split over there: one process would run, whatever
            ``devices`` says; Lightning switches it to DDP only for ``"cpu"``).
    """
    device_type = get_accelerator().device().type
    if device_type == "cpu" and isinstance(strategy, DataParallelStrategy):
        raise ValueError(
            f"{what} is 'dp' (DataParallel), which on accel's CPU backend runs one process "
            "whatever devices says; pass strategy='ddp' (Lightning's 'cpu' accelerator "
            "switches to it)"
        )
    ours = (FabricDDPStrategy, TrainerDDPStrategy)
    lightnings = (FabricDDPBase, trainer_strategies.DDPStrategy)
    # DeepSpeed's strategy extends DDP's without its stream (Lightning refuses it off CUDA).
    others = (FabricDeepSpeedStrategy, trainer_strategies.DeepSpeedStrategy)
    if (
        device_type not in ("cpu", "cuda")  # on CUDA, torch.cuda.Stream is the right stream
        and isinstance(strategy, lightnings)
        and not isinstance(strategy, (*ours, *others))
    ):
        raise ValueError(
            f"{what} is Lightning's {type(strategy).__name__}, which creates a "
            f"torch.cuda.Stream on any device but the CPU; accel's backend runs on "
            f"{device_type!r}: pass strategy={DDP!r}"
        )
