"""Op builders for the native modules compiled at install time, one per catalog row.

DeepSpeed's builders compile C++ on first use (48-141 s cold on a 2-core machine); these
only import the module ``pip install`` already built, so ``load()`` takes milliseconds.
An incompatible builder says why (``incompatibility_reason()``) instead of failing late.

``load()`` returns the validating Python front door of a native module (tensors in,
every argument checked), never the extension itself: the extensions take raw addresses,
and a wrong address cannot be detected in C++, only crash the interpreter.

Each row of :data:`accel.ops.catalog.PREBUILT_OPS` becomes a subclass of
:class:`PrebuiltOpBuilder` named as DeepSpeed names the builder, importable from here
(``from accel.ops.prebuilt import CPUAdamBuilder``) and listed by :data:`CPU_OP_BUILDERS`.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import ClassVar

from accel.ops import isa
from accel.ops.catalog import PREBUILT_OPS, PrebuiltOp, builder_attribute, prebuilt_op, served_on
from accel.protocols._contract import implements
from accel.protocols.op_builder import OpBuilder

logger = logging.getLogger(__name__)


@implements(OpBuilder)
class PrebuiltOpBuilder:
    """A builder whose module was compiled by ``pip install``; each subclass is one row
    (``spec``) of :data:`accel.ops.catalog.PREBUILT_OPS`, made by :func:`builder_class`."""

    spec: ClassVar[PrebuiltOp]
    """The op's row."""
    op_name: ClassVar[str]
    """The op's name (``spec.op_name``)."""
    native_module: ClassVar[str]
    """The module that must import (``spec.native_module``)."""
    module_name: ClassVar[str | None]
    """The module ``load()`` returns (``spec.module``; None: DeepSpeed's builder's)."""

    def name(self) -> str:
        return self.op_name

    def incompatibility_reason(self) -> str | None:
        """Why the op cannot load here, or ``None`` when it can: the row's requirements in
        order, then whether the native module imports (a bad ``ACCEL_CPU_ISA`` that it
        would read is named as such: the kernels are built)."""
        for requirement in self.spec.requires:
            reason = requirement.missing()
            if reason is not None:
                return reason
        try:
            isa.check_before_loading(self.native_module)
        except ValueError as error:
            return str(error)
        try:
            importlib.import_module(self.native_module)
        except ImportError as error:
            return (
                f"{self.native_module} was not built for this platform or failed to load "
                f"({error}); reinstall accel with a C++17 compiler on Linux"
            )
        return None

    def is_compatible(self, verbose: bool = False) -> bool:
        """Logs the reason as a warning when ``verbose``."""
        reason = self.incompatibility_reason()
        if reason is not None and verbose:
            logger.warning("%s is not compatible: %s", self.op_name, reason)
        return reason is None

    def load(self, verbose: bool = False) -> ModuleType:
        """``module_name``, imported (its location logged when ``verbose``); where accel has no
        kernels of its own (``module_name`` is None), the module DeepSpeed's CPU builder of the same
        class name builds. A bad ``ACCEL_CPU_ISA`` that the native module would read is
        its ``ValueError``; any other reason to be incompatible a ``RuntimeError``."""
        isa.check_before_loading(self.native_module)
        reason = self.incompatibility_reason()
        if reason is not None:
            raise RuntimeError(f"cannot load {self.op_name}: {reason}")
        if self.module_name is None:
            deepspeed_builders = importlib.import_module("deepspeed.ops.op_builder.cpu")
            built: ModuleType = getattr(deepspeed_builders, self.spec.builder)().load(verbose)
            return built
        module = importlib.import_module(self.module_name)
        if verbose:
            logger.info("loaded %s from %s", self.op_name, module.__file__)
        return module


def builder_class(op: PrebuiltOp) -> type[PrebuiltOpBuilder]:
    """The builder class of one catalog row, named ``op.builder``, in this module.

    Args:
        op: the op's row.

    Returns:
        A new subclass of :class:`PrebuiltOpBuilder` whose ``spec`` is ``op``.
    """

    class Builder(PrebuiltOpBuilder):
        spec = op
        op_name = op.op_name
        native_module = op.native_module
        module_name = op.module

    Builder.__name__ = Builder.__qualname__ = op.builder
    Builder.__doc__ = op.summary
    return Builder


_BUILDERS: dict[str, type[PrebuiltOpBuilder]] = {
    op.builder: builder_class(op) for op in PREBUILT_OPS
}


def prebuilt_builder(name: str) -> type[PrebuiltOpBuilder]:
    """accel's builder class named ``name``.

    Args:
        name: a builder class name, as DeepSpeed spells it (``"CPUAdamBuilder"``).

    Returns:
        The class (one per name per process).

    Raises:
        KeyError: accel ships no op of that builder name.
    """
    return _BUILDERS[prebuilt_op(name).builder]


def op_builders_for(device_type: str) -> dict[str, type[PrebuiltOpBuilder]]:
    """The builders a backend whose device is ``device_type`` offers, by class name.

    Args:
        device_type: A torch device type (any type other than ``"cpu"`` gets the host ops).

    Returns:
        The builder classes of :func:`accel.ops.catalog.served_on`'s ops, by class name.
    """
    return {op.builder: _BUILDERS[op.builder] for op in served_on(device_type)}


CPU_OP_BUILDERS = op_builders_for("cpu")
"""What the CPU backend offers: every prebuilt op."""
HOST_OP_BUILDERS = op_builders_for("host")
"""What every other device backend offers: the ops whose kernels run on the host."""


def __getattr__(name: str) -> type[PrebuiltOpBuilder]:
    return builder_attribute(__name__, _BUILDERS, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_BUILDERS])
