"""The Lightning accelerator for whatever backend accel selected."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import lightning.fabric.fabric as fabric_module
import lightning.pytorch as pl
import lightning.pytorch.accelerators as trainer_accelerators
import torch
from typing_extensions import override

from accel import get_accelerator
from accel.comm.process_group import set_default_backend
from accel.integrations.lightning._devices import (
    checked_device_index,
    device_index,
    parse_devices,
    process_group_backend,
)
from accel.integrations.lightning._precision import check_autocast_device
from accel.integrations.lightning._strategies import check_strategy

NAME = "accel"


class AccelAccelerator(trainer_accelerators.Accelerator):
    """A Lightning accelerator backed by :func:`accel.get_accelerator`.

    One class serves Fabric and the Trainer (the Trainer's accelerator base extends
    Fabric's). ``devices`` means what it means for Lightning's own accelerators: on the
    CPU backend a number of processes; on a device backend a count of devices, a list of
    indices, ``"0,2"``, or ``-1`` for all of them.
    """

    def __init__(self) -> None:
        super().__init__()
        self._replaced_default: tuple[str, str | None] | None = None

    @override
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current and the backend's collectives DDP's default for it.

        Raises:
            ValueError: ``device`` is not the selected backend's device type (Lightning
                gives a single-device strategy the CPU unless told otherwise).
        """
        acc = get_accelerator()
        expected = acc.device().type
        if device.type != expected:
            raise ValueError(
                f"AccelAccelerator.setup_device: Lightning handed this process {device}, but "
                f"accel's backend {type(acc).__name__} runs on {expected!r} devices. Lightning "
                "gives a single-device strategy the CPU for every accelerator but CUDA and "
                "MPS; pass strategy='accel_single_device' (and strategy='accel_ddp' for "
                "several devices)"
            )
        index = device_index(device)
        if index is not None and expected != "cpu":
            acc.set_device(index)
        # Lightning's DDP asks torch's device -> backend map; point it at the backend's own.
        previous = set_default_backend(device.type, process_group_backend(acc, device.type))
        if self._replaced_default is None:
            self._replaced_default = (device.type, previous)

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Refuse mixed precision that would autocast on another device type, and a
        strategy that cannot run on the backend (:func:`check_strategy`). Under
        ``"ddp_spawn"`` on the CPU backend, give the model private memory again, as
        Lightning does for its ``"cpu"`` accelerator only: ``mp.spawn`` shares the
        parameters of the module it hands each process, and every rank's optimizer would
        step the same memory."""
        check_strategy(trainer.strategy, "AccelAccelerator.setup: the Trainer's strategy")
        check_autocast_device(
            trainer.strategy.precision_plugin,
            "AccelAccelerator.setup: the Trainer's mixed precision",
            "trainer_precision",
        )
        if get_accelerator().device().type == "cpu" and _spawns(trainer.strategy):
            unshare_module(trainer.lightning_module)

    @override
    def teardown(self) -> None:
        """Put back the torch.distributed default that :meth:`setup_device` replaced."""
        if self._replaced_default is not None:
            device_type, previous = self._replaced_default
            set_default_backend(device_type, previous)
            self._replaced_default = None

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int | list[int]:
        """A process count on the CPU backend; device indices on a device backend."""
        return parse_devices(get_accelerator(), devices)

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One torch device per process."""
        acc = get_accelerator()
        parsed = parse_devices(acc, devices)
        if isinstance(parsed, int):
            return [acc.device()] * parsed
        return [acc.device(index) for index in parsed]

    @staticmethod
    @override
    def auto_device_count() -> int:
        """The backend's device count (one process on the CPU backend)."""
        return get_accelerator().device_count()

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether accel's selected backend can run here."""
        return get_accelerator().is_available()

    @staticmethod
    @override
    def name() -> str:
        """``"accel"``."""
        return NAME

    @override
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The backend's memory statistics for ``device`` (MemoryAPI), in bytes.

        Raises:
            ValueError: ``device`` is not one of the backend's devices.
        """
        acc = get_accelerator()
        index = checked_device_index(acc, device, "AccelAccelerator.get_device_stats")
        stats: dict[str, Any] = dict(acc.memory_stats(index))
        stats.update(
            allocated_bytes=acc.memory_allocated(index),
            max_allocated_bytes=acc.max_memory_allocated(index),
            reserved_bytes=acc.memory_reserved(index),
            max_reserved_bytes=acc.max_memory_reserved(index),
            total_bytes=acc.total_memory(index),
            available_bytes=acc.available_memory(index),
        )
        return stats

    @classmethod
    @override
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        """Register under ``"accel"`` (Lightning's registries call this hook)."""
        accelerator_registry.register(
            NAME, cls, description="any accel backend (accel.get_accelerator())", override=True
        )


def _spawns(strategy: object) -> bool:
    """Whether ``strategy`` starts its processes with ``mp.spawn`` (``"ddp_spawn"``)."""
    return getattr(strategy, "_start_method", None) == "spawn"


@torch.no_grad()
def unshare_module(module: torch.nn.Module) -> None:
    """Give ``module``'s parameters and buffers memory of their own (a copy each)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        tensor.data = tensor.data.clone()


def check_fabric_choices() -> None:
    """Make a ``Fabric`` on :class:`AccelAccelerator` refuse, when it is constructed,
    mixed precision that autocasts on another device type and a strategy that cannot run
    on the backend (:func:`check_strategy`) (idempotent; done on import).

    The Trainer calls its accelerator's ``setup`` with both in reach; Fabric calls no
    accelerator or precision hook that could check them before the first forward (which
    then fails in a layer on mismatched dtypes, or in torch.cuda), or never (``"dp"``
    then runs one process). So ``Fabric.__init__`` is wrapped: after Lightning's own, it
    checks ``fabric.strategy`` and its precision.
    """
    init: Any = fabric_module.Fabric.__init__
    if getattr(init, _CHECKS, False):
        return

    @functools.wraps(init)
    def checked_init(fabric: fabric_module.Fabric, *args: Any, **kwargs: Any) -> None:
        init(fabric, *args, **kwargs)
        if isinstance(fabric.accelerator, AccelAccelerator):
            check_strategy(fabric.strategy, "Fabric(accelerator='accel'): its strategy")
            if get_accelerator().device().type == "cpu" and _spawns(fabric.strategy):
                # Fabric's launcher gives private memory back only for its "cpu"
                # accelerator, and no hook sees the modules passed to launch().
                raise ValueError(
                    "Fabric(accelerator='accel'): its strategy starts processes with "
                    "mp.spawn ('ddp_spawn'), which shares the memory of a module passed to "
                    "launch() between the ranks on accel's CPU backend; pass "
                    "strategy='ddp' (or 'ddp_fork')"
                )
            check_autocast_device(
                fabric.strategy.precision,
                "Fabric(accelerator='accel'): its mixed precision",
                "fabric_precision",
            )

    setattr(checked_init, _CHECKS, True)
    setattr(fabric_module.Fabric, "__init__", checked_init)  # noqa: B010  (a method)


_CHECKS = "_accel_checks_choices"
