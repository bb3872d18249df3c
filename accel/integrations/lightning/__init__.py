"""Lightning on any accel backend: ``Fabric(accelerator="accel")``, ``Trainer(...)`` too.

    fabric = lightning.Fabric(accelerator="accel", devices=2)
    trainer = lightning.Trainer(accelerator="accel", devices=2)

:class:`AccelAccelerator` is one Lightning accelerator for every backend accel can select
(built-in, a vendor's plugin, a device accel has never heard of): devices are parsed,
counted and set through :func:`accel.get_accelerator`, device stats come from its
MemoryAPI, and DDP uses the backend's own torch.distributed library
(``communication_backend_name()``: the ``"accel"`` shared-memory backend on the CPU).

Lightning picks three things by accelerator *name* rather than asking the accelerator;
on a device backend name them (on the CPU backend, only mixed precision needs naming):

- ``strategy="accel_single_device"`` for one process (Lightning's default puts the model
  on the CPU for every accelerator but CUDA and MPS; the accelerator raises rather than
  train there) and ``strategy="accel_ddp"`` for several (Lightning's DDP creates a
  ``torch.cuda.Stream`` on any non-CPU device);
- ``plugins=[fabric_precision("bf16-mixed")]`` / ``[trainer_precision(...)]`` for mixed
  precision, on every backend (Lightning autocasts on ``"cuda"`` unless the accelerator
  is named ``"cpu"`` or ``"mps"``). A mixed-precision plugin for another device is
  refused: by the accelerator's ``setup`` in the Trainer, and when a ``Fabric`` is
  constructed (Fabric calls no hook that sees the plugin, so importing this package
  wraps ``Fabric.__init__`` to check it). Lightning's own DDP on a device backend but CUDA, and
  Fabric's ``"dp"`` on the CPU backend, are refused there too, naming the strategy to pass.

Importing this package registers those names with Lightning; accel's start-up hook
(``accel-startup.pth``, :mod:`_accel_startup`) imports it once a process has imported
``lightning``, so user code need not. Importing this package imports Lightning;
``import accel`` never does.
"""

from __future__ import annotations

import lightning.fabric.accelerators as fabric_accelerators
import lightning.pytorch.accelerators as trainer_accelerators

from accel.integrations.lightning import _strategies
from accel.integrations.lightning._accelerator import NAME, AccelAccelerator, check_fabric_choices
from accel.integrations.lightning._precision import fabric_precision, trainer_precision
from accel.integrations.lightning._strategies import (
    DDP,
    SINGLE_DEVICE,
    FabricDDPStrategy,
    FabricSingleDeviceStrategy,
    TrainerDDPStrategy,
    TrainerSingleDeviceStrategy,
)

__all__ = [
    "DDP",
    "NAME",
    "SINGLE_DEVICE",
    "AccelAccelerator",
    "FabricDDPStrategy",
    "FabricSingleDeviceStrategy",
    "TrainerDDPStrategy",
    "TrainerSingleDeviceStrategy",
    "fabric_precision",
    "register",
    "trainer_precision",
]


def register() -> None:
    """Register ``"accel"``, ``"accel_single_device"`` and ``"accel_ddp"`` with Fabric's
    and the Trainer's registries, and make ``Fabric`` check its strategy and precision
    plugin (idempotent; done on import)."""
    for registry in (
        fabric_accelerators.ACCELERATOR_REGISTRY,
        trainer_accelerators.AcceleratorRegistry,
    ):
        # `NAME in registry`, not registry.get(NAME): Lightning's get() instantiates.
        if NAME not in registry or registry[NAME]["accelerator"] is not AccelAccelerator:
            AccelAccelerator.register_accelerators(registry)
    _strategies.register()
    check_fabric_choices()


register()
