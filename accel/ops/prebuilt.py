"""Op builders for the native modules compiled at install time.

DeepSpeed's builders compile C++ on first use (48-141 s cold on a 2-core machine); these
only import the module ``pip install`` already built, so ``load()`` takes milliseconds.
An incompatible builder says why (``incompatibility_reason()``) instead of failing late.

``load()`` returns the validating Python front door of a native module (tensors in,
every argument checked), never the extension itself: the extensions take raw addresses,
and a wrong address cannot be detected in C++, only crash the interpreter.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from types import ModuleType
from typing import ClassVar

from accel.ops.catalog import PrebuiltOp, prebuilt_op, served_on

logger = logging.getLogger(__name__)


class PrebuiltOpBuilder:
    """A builder whose module was compiled by ``pip install``; each subclass is one row
    (``spec``) of :data:`accel.ops.catalog.PREBUILT_OPS`."""

    spec: ClassVar[PrebuiltOp]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        spec = cls.__dict__.get("spec")
        if spec is not None:  # the names older code reads, from the one table
            cls.op_name, cls.native_module, cls.module_name = (
                spec.op_name, spec.native_module, spec.module,
            )  # fmt: skip

    op_name: ClassVar[str]
    """The op's name (``spec.op_name``)."""
    native_module: ClassVar[str]
    """The module that must import (``spec.native_module``)."""
    module_name: ClassVar[str]
    """The module ``load()`` returns (``spec.module``)."""

    def name(self) -> str:
        """The op's name, e.g. ``"cpu_adam"``."""
        return self.op_name

    def incompatibility_reason(self) -> str | None:
        """Why the module cannot load here, or ``None`` when it can."""
        try:
            importlib.import_module(self.native_module)
        except ImportError as error:
            return (
                f"{self.native_module} was not built for this platform or failed to load "
                f"({error}); reinstall accel with a C++17 compiler on Linux"
            )
        return None

    def is_compatible(self, verbose: bool = False) -> bool:
        """Whether :meth:`load` will succeed (logs the reason when ``verbose``)."""
        reason = self.incompatibility_reason()
        if reason is not None and verbose:
            logger.warning("%s is not compatible: %s", self.op_name, reason)
        return reason is None

    def load(self, verbose: bool = False) -> ModuleType:
        """The op's validating module; ``RuntimeError`` with the reason when incompatible."""
        reason = self.incompatibility_reason()
        if reason is not None:
            raise RuntimeError(f"cannot load {self.op_name}: {reason}")
        module = importlib.import_module(self.module_name)
        if verbose:
            logger.info("loaded %s from %s", self.op_name, module.__file__)
        return module


class CPUOptimBuilder(PrebuiltOpBuilder):
    """The CPU optimizer kernels: one extension, front door ``accel.ops.cpu_optim``."""


class CPUAdamBuilder(CPUOptimBuilder):
    """Adam and AdamW steps on the CPU (ZeRO-Offload)."""

    spec = prebuilt_op("CPUAdamBuilder")


class FusedAdamBuilder(CPUAdamBuilder):
    """DeepSpeed's FusedAdam on the CPU: the same multi-tensor Adam kernel."""

    spec = prebuilt_op("FusedAdamBuilder")


class CPUAdagradBuilder(CPUOptimBuilder):
    """Adagrad steps on the CPU."""

    spec = prebuilt_op("CPUAdagradBuilder")


class CPULionBuilder(CPUOptimBuilder):
    """Lion steps on the CPU."""

    spec = prebuilt_op("CPULionBuilder")


class FusedLionBuilder(CPUOptimBuilder):
    """Multi-tensor Lion on the CPU (``lion_step`` takes every tensor in one call), the
    CPU kernel DeepSpeed's FusedLion lacks."""

    spec = prebuilt_op("FusedLionBuilder")


class AsyncIOBuilder(PrebuiltOpBuilder):
    """Asynchronous tensor file I/O (``accel.io``): host-side, so every backend has it.

    Nothing is compiled: the engine is a pool of threads in ``pread``/``pwrite``, which
    release the GIL (docs/io.md has the measurements behind that choice).
    """

    spec = prebuilt_op("AsyncIOBuilder")

    def incompatibility_reason(self) -> str | None:
        """``None`` on POSIX systems (``os.pread``/``os.pwrite`` exist), else why not."""
        if not hasattr(os, "pwrite") or not hasattr(os, "preadv"):
            return "this platform has no os.pwrite/os.preadv (accel.io needs POSIX)"
        return super().incompatibility_reason()


class PinMemoryBuilder(PrebuiltOpBuilder):
    """Page-locked host buffers, one registry per process (``accel.io.locked``):
    host-side, so every backend has it. Nothing is compiled (``mlock`` through ctypes)."""

    spec = prebuilt_op("PinMemoryBuilder")

    def incompatibility_reason(self) -> str | None:
        """``None`` on POSIX systems (``mlock`` exists), else why not."""
        if os.name != "posix":
            return "page-locking needs POSIX mlock(2)"
        return super().incompatibility_reason()


class CCLCommBuilder(PrebuiltOpBuilder):
    """DeepSpeed's oneCCL comm module. accel has no oneCCL kernels of its own: with
    oneCCL's torch bindings installed, ``load()`` returns DeepSpeed's builder's module (which
    DeepSpeed compiles, as without accel); without them it is incompatible, saying why."""

    spec = prebuilt_op("CCLCommBuilder")

    def incompatibility_reason(self) -> str | None:
        """Why oneCCL cannot be used here, or ``None``."""
        try:
            importlib.import_module("oneccl_bindings_for_pytorch")
        except ImportError as error:
            return f"oneCCL's torch bindings (oneccl_bindings_for_pytorch) do not import: {error}"
        if importlib.util.find_spec("deepspeed") is None:
            return (
                "the oneCCL comm module is DeepSpeed's CCLCommBuilder; deepspeed is not installed"
            )
        return None

    def load(self, verbose: bool = False) -> ModuleType:
        """DeepSpeed's compiled ``deepspeed_ccl_comm`` (``RuntimeError`` when incompatible)."""
        reason = self.incompatibility_reason()
        if reason is not None:
            raise RuntimeError(f"cannot load {self.op_name}: {reason}")
        cpu_builders = importlib.import_module("deepspeed.ops.op_builder.cpu")
        module: ModuleType = cpu_builders.CCLCommBuilder().load(verbose)
        return module


class ShareMemCommBuilder(PrebuiltOpBuilder):
    """Shared-memory all-reduce for the ranks of one node (use accel.comm.all_reduce_)."""

    spec = prebuilt_op("ShareMemCommBuilder")


_BUILDERS: dict[str, type[PrebuiltOpBuilder]] = {
    builder.__name__: builder
    for builder in (
        AsyncIOBuilder, CCLCommBuilder, CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder,
        FusedAdamBuilder, FusedLionBuilder, PinMemoryBuilder, ShareMemCommBuilder,
    )
}  # fmt: skip


def prebuilt_builder(name: str) -> type[PrebuiltOpBuilder]:
    """accel's builder class named ``name`` (``KeyError`` when there is none)."""
    return _BUILDERS[name]


def op_builders_for(device_type: str) -> dict[str, type[PrebuiltOpBuilder]]:
    """The builders a backend whose device is ``device_type`` offers, by class name."""
    return {op.builder: _BUILDERS[op.builder] for op in served_on(device_type)}


CPU_OP_BUILDERS = op_builders_for("cpu")
"""What the CPU backend offers: every prebuilt op."""
HOST_OP_BUILDERS = op_builders_for("host")
"""What every other device backend offers: the ops whose kernels run on the host."""
