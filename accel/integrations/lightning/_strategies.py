"""Strategies for device backends, where Lightning's assume CUDA.

Lightning's single-device strategy defaults to the CPU, and its DDP strategies wrap the
model on a fresh ``torch.cuda.Stream`` whenever the device is not the CPU. These
subclasses take the device from accel and the stream from the backend's StreamAPI (none
on a synchronous device); the rest is Lightning's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import lightning.fabric.strategies as fabric_strategies
import lightning.pytorch.strategies as trainer_strategies
import torch
from lightning.fabric.strategies.ddp import DDPStrategy as FabricDDPBase
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


class FabricSingleDeviceStrategy(FabricSingleDeviceBase):
    """Fabric's single-device strategy on accel's current device (``"accel_single_device"``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(device=current_device(), **kwargs)


class TrainerSingleDeviceStrategy(trainer_strategies.SingleDeviceStrategy):
    """The Trainer's single-device strategy on accel's device (``"accel_single_device"``)."""

    def __init__(self, **kwargs: Any) -> None:
        # Lightning types the accelerator parameter with a name pyright cannot resolve.
        super().__init__(device=current_device(), **kwargs)  # pyright: ignore[reportUnknownMemberType]


class FabricDDPStrategy(FabricDDPBase):
    """Fabric's DDP without CUDA's stream (``"accel_ddp"``)."""

    @override
    def setup_module(self, module: torch.nn.Module) -> DistributedDataParallel:
        """Wrap ``module`` in DDP, on the backend's side stream if it has streams."""
        return _wrap(module, self.root_device, self._ddp_kwargs)


class TrainerDDPStrategy(trainer_strategies.DDPStrategy):
    """The Trainer's DDP without CUDA's stream (``"accel_ddp"``)."""

    @override
    def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
        return _wrap(model, self.root_device, self._ddp_kwargs)


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
