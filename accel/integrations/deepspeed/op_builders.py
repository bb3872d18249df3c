"""DeepSpeed op builders that load accel's prebuilt kernels instead of compiling.

Each class is a DeepSpeed ``OpBuilder`` (same ``NAME``, ``BUILD_VAR``, ``load()``,
``is_compatible()``), so DeepSpeed's optimizers and comm layer use it unmodified; ``load()``
returns an object with the function names and signatures of DeepSpeed's compiled module
(:mod:`accel.integrations.deepspeed.kernels`). Nothing is ever compiled: ``builder()``
and ``jit_load()`` never reach a compiler.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path
from typing import Any, ClassVar

from accel.integrations.deepspeed import comm_ops, kernels
from accel.ops.catalog import deepspeed_builders, prebuilt_op
from accel.ops.prebuilt import prebuilt_builder

# Untyped in DeepSpeed; taken as Any so that the annotations below are what is checked.
OpBuilder: Any = importlib.import_module("deepspeed.ops.op_builder.builder").OpBuilder


class AccelOpBuilder(OpBuilder):  # type: ignore[misc]
    """A DeepSpeed op builder over one of accel's prebuilt extensions."""

    NAME: ClassVar[str]
    BUILD_VAR: ClassVar[str]

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=self.NAME if name is None else name)  # pyright: ignore[reportUnknownMemberType]

    def absolute_name(self) -> str:
        """Where the kernels live (accel's module, not a DeepSpeed build product)."""
        return f"{prebuilt_op(type(self).__name__).native_module} (accel, prebuilt)"

    def sources(self) -> list[str]:
        """None: the kernels were compiled when accel was installed."""
        return []

    def incompatibility_reason(self) -> str | None:
        """Why the kernels cannot load here, or ``None`` (accel's own builder decides)."""
        return prebuilt_builder(type(self).__name__)().incompatibility_reason()

    def is_compatible(self, verbose: bool = False) -> bool:
        """Whether :meth:`load` will succeed (prints the reason when ``verbose``, as
        DeepSpeed's builders do)."""
        reason = self.incompatibility_reason()
        if reason is not None and verbose:
            self.warning(f"{self.NAME} is not compatible: {reason}")
        return reason is None

    def load(self, verbose: bool = True) -> Any:
        """The kernels, with DeepSpeed's module API (one object per process, as a
        compiled module is)."""
        reason = self.incompatibility_reason()
        if reason is not None:
            raise RuntimeError(f"cannot load {self.NAME}: {reason}")
        return self._kernels()

    def jit_load(self, verbose: bool = True) -> Any:
        """Same as :meth:`load`: there is nothing to compile."""
        return self.load(verbose)

    def builder(self) -> Any:
        """Never used: DeepSpeed asks for an extension only to compile it."""
        raise RuntimeError(
            f"{self.NAME} is prebuilt by accel; there is no extension to build "
            "(DS_BUILD_OPS pre-compilation does not apply to it)"
        )

    def _kernels(self) -> Any:
        raise NotImplementedError


def _deepspeed_name(builder: str) -> str:
    """The ``NAME`` of DeepSpeed's builder ``builder`` replaces (from the catalog)."""
    name = prebuilt_op(builder).deepspeed_name
    if name is None:
        raise LookupError(f"the catalog says accel does not replace DeepSpeed's {builder}")
    return name


_singles: dict[type[Any], Any] = {}


def _native_builder(class_name: str) -> Any:
    """DeepSpeed's own builder of an op for the device (not accel's)."""
    real_accelerator = importlib.import_module("deepspeed.accelerator.real_accelerator")
    current: Any = real_accelerator.get_accelerator()
    native: Any = getattr(current, "native_accelerator", current)  # accel's adapter: DeepSpeed's
    builder = native.get_op_builder(class_name) if native is not None else None
    if builder is None:
        raise AttributeError(f"DeepSpeed has no {class_name} for this device to fall back to")
    return builder()


def _native_module(class_name: str) -> Any:
    """DeepSpeed's own build of a module, for the functions accel does not implement:
    its builder for the device, compiled on first use as without accel."""
    return _native_builder(class_name).load()


_BINDING = re.compile(r'm\.def\(\s*"(\w+)"')


def _native_names(class_name: str) -> frozenset[str]:
    """The functions DeepSpeed's module declares, read from its binding sources (shipped
    with DeepSpeed): nothing is built. Empty when the builder or its sources are absent."""
    try:
        builder = _native_builder(class_name)
        paths = [builder.deepspeed_src_path(source) for source in builder.sources()]
    except AttributeError:  # DeepSpeed has no such builder for this device: nothing declared
        return frozenset()
    names: set[str] = set()
    for path in paths:
        with contextlib.suppress(OSError):
            names.update(_BINDING.findall(Path(path).read_text(errors="replace")))
    return frozenset(names)


def _single(kernels_class: type[Any], class_name: str) -> Any:
    # One kernels object per class per process, as a compiled module is one object.
    if kernels_class not in _singles:
        _singles[kernels_class] = kernels_class(
            lambda: _native_module(class_name), lambda: _native_names(class_name)
        )
    return _singles[kernels_class]


class _CPUOptimBuilder(AccelOpBuilder):
    """The optimizer builders: one extension, one kernels object per class per process."""

    kernels_class: ClassVar[type[Any]]

    def _kernels(self) -> Any:
        return _single(self.kernels_class, type(self).__name__)


class CPUAdamBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPUAdamBuilder`` (ZeRO-Offload's Adam) on accel's kernels."""

    NAME = _deepspeed_name("CPUAdamBuilder")
    BUILD_VAR = "DS_BUILD_CPU_ADAM"
    kernels_class = kernels.CPUAdamKernels


class CPUAdagradBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPUAdagradBuilder`` on accel's kernels."""

    NAME = _deepspeed_name("CPUAdagradBuilder")
    BUILD_VAR = "DS_BUILD_CPU_ADAGRAD"
    kernels_class = kernels.CPUAdagradKernels


class CPULionBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPULionBuilder`` on accel's kernels."""

    NAME = _deepspeed_name("CPULionBuilder")
    BUILD_VAR = "DS_BUILD_CPU_LION"
    kernels_class = kernels.CPULionKernels


class FusedAdamBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``FusedAdamBuilder`` on the CPU (``multi_tensor_adam``)."""

    NAME = _deepspeed_name("FusedAdamBuilder")
    BUILD_VAR = "DS_BUILD_FUSED_ADAM"
    kernels_class = kernels.FusedAdamKernels


class FusedLionBuilder(_CPUOptimBuilder):
    """``multi_tensor_lion`` on the CPU, which DeepSpeed's CPU backend does not have."""

    NAME = _deepspeed_name("FusedLionBuilder")
    BUILD_VAR = "DS_BUILD_FUSED_LION"
    kernels_class = kernels.FusedLionKernels


class ShareMemCommBuilder(AccelOpBuilder):
    """DeepSpeed's ``ShareMemCommBuilder``: ``initialize`` plus the
    ``torch.ops.deepspeed.inference_all_reduce(_)`` ops, on accel's shared memory."""

    NAME = _deepspeed_name("ShareMemCommBuilder")
    BUILD_VAR = "DS_BUILD_SHM_COMM"

    def _kernels(self) -> Any:
        comm_ops.register_ops()
        return _single(comm_ops.ShmCommKernels, type(self).__name__)


class AsyncIOBuilder(AccelOpBuilder):
    """DeepSpeed's ``AsyncIOBuilder`` (ZeRO-Infinity's NVMe swapping) on :mod:`accel.io`:
    no libaio, no compiler."""

    NAME = _deepspeed_name("AsyncIOBuilder")
    BUILD_VAR = "DS_BUILD_AIO"

    def _kernels(self) -> Any:
        from accel.integrations.deepspeed.aio import AsyncIOKernels

        return _single(AsyncIOKernels, type(self).__name__)


class PinMemoryBuilder(AccelOpBuilder):
    """DeepSpeed's ``PinMemoryBuilder`` (its native pinned-memory backend) on
    :mod:`accel.io.locked`: the manager accel's ``aio_handle`` shares, as DeepSpeed's does."""

    NAME = _deepspeed_name("PinMemoryBuilder")
    BUILD_VAR = "DS_BUILD_PIN_MEMORY"

    def _kernels(self) -> Any:
        from accel.integrations.deepspeed.pin_memory import PinMemoryKernels

        return _single(PinMemoryKernels, type(self).__name__)


_ALL: dict[str, type[AccelOpBuilder]] = {
    builder.__name__: builder
    for builder in (
        AsyncIOBuilder, CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder, FusedAdamBuilder,
        FusedLionBuilder, PinMemoryBuilder, ShareMemCommBuilder,
    )
}  # fmt: skip


def accel_builders(device_type: str) -> dict[str, type[AccelOpBuilder]]:
    """accel's builders for DeepSpeed on ``device_type``, by DeepSpeed class name (which
    ones: :func:`accel.ops.catalog.deepspeed_builders`)."""
    return {name: _ALL[name] for name in deepspeed_builders(device_type)}


def accel_builder(device_type: str, class_name: str) -> type[AccelOpBuilder] | None:
    """accel's builder named ``class_name`` for ``device_type``, or ``None``."""
    return accel_builders(device_type).get(class_name)
