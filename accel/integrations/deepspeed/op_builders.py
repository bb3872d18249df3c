"""DeepSpeed op builders that load accel's prebuilt kernels instead of compiling.

Each is a DeepSpeed ``OpBuilder`` (same ``NAME``, ``BUILD_VAR``, ``load()``,
``is_compatible()``), so DeepSpeed's optimizers and comm layer use it unmodified; ``load()``
returns an object with the function names and signatures of DeepSpeed's compiled module
(:mod:`accel.integrations.deepspeed.kernels`). Nothing is ever compiled: ``builder()``
and ``jit_load()`` never reach a compiler.

Each row of :data:`accel.ops.catalog.PREBUILT_OPS` with a ``deepspeed`` column becomes a
subclass of :class:`AccelOpBuilder` named as DeepSpeed names the builder
(``op_builders.CPUAdamBuilder``); :func:`accel_builders` lists them per device.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accel.ops import isa
from accel.ops.catalog import (
    PREBUILT_OPS,
    DeepSpeedOp,
    PrebuiltOp,
    builder_attribute,
    deepspeed_builders,
)
from accel.ops.prebuilt import prebuilt_builder

if TYPE_CHECKING:
    from accel.integrations.deepspeed.kernels import DeepSpeedModule

# Untyped in DeepSpeed; taken as Any so that the annotations below are what is checked.
OpBuilder: Any = importlib.import_module("deepspeed.ops.op_builder.builder").OpBuilder


class AccelOpBuilder(OpBuilder):  # type: ignore[misc]
    """A DeepSpeed op builder over one of accel's prebuilt extensions; each subclass is one
    row (``spec``) of :data:`accel.ops.catalog.PREBUILT_OPS`, made by :func:`builder_class`."""

    spec: ClassVar[PrebuiltOp]
    """The op's row."""
    NAME: ClassVar[str]
    """DeepSpeed's name for the op (``spec.deepspeed.name``)."""
    BUILD_VAR: ClassVar[str]
    """The variable that would ask DeepSpeed to compile it (``spec.deepspeed.build_var``)."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=self.NAME if name is None else name)  # pyright: ignore[reportUnknownMemberType]

    def absolute_name(self) -> str:
        """Where the kernels live (accel's module, not a DeepSpeed build product)."""
        return f"{self.spec.native_module} (accel, prebuilt)"

    def sources(self) -> list[str]:
        """None: the kernels were compiled when accel was installed."""
        return []

    def incompatibility_reason(self) -> str | None:
        """Why the kernels cannot load here, or ``None`` (accel's own builder decides)."""
        return prebuilt_builder(self.spec.builder)().incompatibility_reason()

    def is_compatible(self, verbose: bool = False) -> bool:
        """Whether :meth:`load` will succeed (prints the reason when ``verbose``, as
        DeepSpeed's builders do).

        Args:
            verbose: Print why not, through DeepSpeed's builder ``warning``.

        Returns:
            ``True`` when :meth:`incompatibility_reason` is ``None``.
        """
        reason = self.incompatibility_reason()
        if reason is not None and verbose:
            self.warning(f"{self.NAME} is not compatible: {reason}")
        return reason is None

    def load(self, verbose: bool = True) -> Any:
        """The kernels, with DeepSpeed's module API.

        Args:
            verbose: Not used; DeepSpeed passes it to every builder.

        Returns:
            One object per builder per process, as a compiled module is one object: an
            instance of the row's ``deepspeed.kernels`` class.

        Raises:
            ValueError: ``ACCEL_CPU_ISA`` holds a bad value and the kernels have not loaded
                yet (the message names it, its value and the levels).
            RuntimeError: The kernels cannot load here for another reason; the message
                says why.
        """
        isa.check_before_loading(self.spec.native_module)
        reason = self.incompatibility_reason()
        if reason is not None:
            raise RuntimeError(f"cannot load {self.NAME}: {reason}")
        return _single(self.spec)

    def jit_load(self, verbose: bool = True) -> Any:
        """Same as :meth:`load`: there is nothing to compile.

        Args:
            verbose: Not used; DeepSpeed passes it to every builder.

        Returns:
            :meth:`load`'s kernels object.

        Raises:
            ValueError: As :meth:`load`, for a bad ``ACCEL_CPU_ISA``.
            RuntimeError: The kernels cannot load here; the message says why.
        """
        return self.load(verbose)

    def builder(self) -> Any:
        """Never used: DeepSpeed asks for an extension only to compile it."""
        raise RuntimeError(
            f"{self.NAME} is prebuilt by accel; there is no extension to build "
            "(DS_BUILD_OPS pre-compilation does not apply to it)"
        )


def _deepspeed_op(op: PrebuiltOp) -> DeepSpeedOp:
    """The row's ``deepspeed`` column (``LookupError`` where DeepSpeed keeps its builder)."""
    if op.deepspeed is None:
        raise LookupError(
            f"the catalog says accel does not replace DeepSpeed's {op.builder} "
            "(its deepspeed column is None)"
        )
    return op.deepspeed


_singles: dict[str, DeepSpeedModule] = {}


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


def _kernels_class(reference: str) -> type[DeepSpeedModule]:
    """The class a row's ``deepspeed.kernels`` names (``"module:Class"``), imported now:
    the kernels import torch and the extensions, which listing the builders must not."""
    from accel.integrations.deepspeed.kernels import DeepSpeedModule

    module_name, _, class_name = reference.partition(":")
    found: object = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(found, type) and issubclass(found, DeepSpeedModule)):
        raise TypeError(
            f"deepspeed.kernels must be 'module:Class' naming a DeepSpeedModule subclass, "
            f"got {reference!r} ({found!r})"
        )
    return found


def _single(op: PrebuiltOp) -> DeepSpeedModule:
    # One kernels object per op per process, as a compiled module is one object.
    if op.builder not in _singles:
        kernels_class = _kernels_class(_deepspeed_op(op).kernels)
        _singles[op.builder] = kernels_class(
            lambda: _native_module(op.builder), lambda: _native_names(op.builder)
        )
    return _singles[op.builder]


def builder_class(op: PrebuiltOp) -> type[AccelOpBuilder]:
    """The DeepSpeed builder class of one catalog row, named ``op.builder``, in this module.

    Args:
        op: The op's row.

    Returns:
        A new subclass of :class:`AccelOpBuilder` whose ``spec`` is ``op``.

    Raises:
        LookupError: The row has no ``deepspeed`` column (DeepSpeed keeps its builder).
    """
    deepspeed = _deepspeed_op(op)

    class Builder(AccelOpBuilder):
        spec = op
        NAME = deepspeed.name
        BUILD_VAR = deepspeed.build_var

    Builder.__name__ = Builder.__qualname__ = op.builder
    Builder.__doc__ = f"DeepSpeed's ``{op.builder}`` on accel's prebuilt kernels. {op.summary}"
    return Builder


_ALL: dict[str, type[AccelOpBuilder]] = {
    op.builder: builder_class(op) for op in PREBUILT_OPS if op.deepspeed is not None
}


def accel_builders(device_type: str) -> dict[str, type[AccelOpBuilder]]:
    """accel's builders for DeepSpeed on ``device_type``, by DeepSpeed class name (which
    ones: :func:`accel.ops.catalog.deepspeed_builders`).

    Args:
        device_type: The device type DeepSpeed runs on, e.g. ``"cpu"``.

    Returns:
        A new ``dict`` of :class:`AccelOpBuilder` subclasses by DeepSpeed class name, one
        for each catalog op with a ``deepspeed`` column: every such op on the CPU, the ops
        whose kernels run on the host (``host``) on other device types.
    """
    return {name: _ALL[name] for name in deepspeed_builders(device_type)}


def accel_builder(device_type: str, class_name: str) -> type[AccelOpBuilder] | None:
    """accel's builder named ``class_name`` for ``device_type``, or ``None``.

    Args:
        device_type: The device type DeepSpeed runs on, e.g. ``"cpu"``.
        class_name: DeepSpeed's name of the builder class, e.g. ``"CPUAdamBuilder"``.

    Returns:
        The :class:`AccelOpBuilder` subclass from :func:`accel_builders`; ``None`` where
        accel serves no builder of that name on the device.
    """
    return accel_builders(device_type).get(class_name)


def __getattr__(name: str) -> type[AccelOpBuilder]:
    return builder_attribute(__name__, _ALL, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_ALL])
