"""DeepSpeed op builders that load accel's prebuilt kernels instead of compiling.

Each class is a DeepSpeed ``OpBuilder`` (same ``NAME``, ``BUILD_VAR``, ``load()``,
``is_compatible()``), so DeepSpeed's optimizers and comm layer use it unmodified; ``load()``
returns an object with the function names and signatures of DeepSpeed's compiled module
(:mod:`accel.integrations.deepspeed.kernels`). Nothing is ever compiled: ``builder()``
and ``jit_load()`` never reach a compiler.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from accel.integrations.deepspeed import comm_ops, kernels
from accel.integrations.deepspeed._support import CPU_BUILDERS, HOST_BUILDERS

# Untyped in DeepSpeed; taken as Any so that the annotations below are what is checked.
OpBuilder: Any = importlib.import_module("deepspeed.ops.op_builder.builder").OpBuilder


class AccelOpBuilder(OpBuilder):  # type: ignore[misc]
    """A DeepSpeed op builder over one of accel's prebuilt extensions."""

    NAME: ClassVar[str]
    BUILD_VAR: ClassVar[str]
    native_module: ClassVar[str]
    """The accel extension the kernels run in (what must import for ``is_compatible``)."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=self.NAME if name is None else name)  # pyright: ignore[reportUnknownMemberType]

    def absolute_name(self) -> str:
        """Where the kernels live (accel's module, not a DeepSpeed build product)."""
        return f"{self.native_module} (accel, prebuilt)"

    def sources(self) -> list[str]:
        """None: the kernels were compiled when accel was installed."""
        return []

    def incompatibility_reason(self) -> str | None:
        """Why the kernels cannot load here, or ``None``."""
        try:
            importlib.import_module(self.native_module)
        except ImportError as error:
            return (
                f"accel's {self.native_module} was not built for this platform ({error}); "
                "reinstall accel with a C++17 compiler on Linux"
            )
        return None

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


_singles: dict[type[Any], Any] = {}


def _native_module(class_name: str) -> Any:
    """DeepSpeed's own build of a module, for the functions accel does not implement:
    its builder for the device, compiled on first use as without accel."""
    real_accelerator = importlib.import_module("deepspeed.accelerator.real_accelerator")
    current: Any = real_accelerator.get_accelerator()
    native: Any = getattr(current, "_native", current)  # accel's adapter keeps DeepSpeed's
    builder = native.get_op_builder(class_name) if native is not None else None
    if builder is None:
        raise AttributeError(f"DeepSpeed has no {class_name} for this device to fall back to")
    return builder().load()


def _single(kernels_class: type[Any], class_name: str) -> Any:
    # One kernels object per class per process, as a compiled module is one object.
    if kernels_class not in _singles:
        _singles[kernels_class] = kernels_class(lambda: _native_module(class_name))
    return _singles[kernels_class]


class _CPUOptimBuilder(AccelOpBuilder):
    """The optimizer builders: one extension, one kernels object per class per process."""

    native_module: ClassVar[str] = "accel.ops._cpu_optim"
    kernels_class: ClassVar[type[Any]]

    def _kernels(self) -> Any:
        return _single(self.kernels_class, type(self).__name__)


class CPUAdamBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPUAdamBuilder`` (ZeRO-Offload's Adam) on accel's kernels."""

    NAME = "cpu_adam"
    BUILD_VAR = "DS_BUILD_CPU_ADAM"
    kernels_class = kernels.CPUAdamKernels


class CPUAdagradBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPUAdagradBuilder`` on accel's kernels."""

    NAME = "cpu_adagrad"
    BUILD_VAR = "DS_BUILD_CPU_ADAGRAD"
    kernels_class = kernels.CPUAdagradKernels


class CPULionBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``CPULionBuilder`` on accel's kernels."""

    NAME = "cpu_lion"
    BUILD_VAR = "DS_BUILD_CPU_LION"
    kernels_class = kernels.CPULionKernels


class FusedAdamBuilder(_CPUOptimBuilder):
    """DeepSpeed's ``FusedAdamBuilder`` on the CPU (``multi_tensor_adam``)."""

    NAME = "fused_adam"
    BUILD_VAR = "DS_BUILD_FUSED_ADAM"
    kernels_class = kernels.FusedAdamKernels


class FusedLionBuilder(_CPUOptimBuilder):
    """``multi_tensor_lion`` on the CPU, which DeepSpeed's CPU backend does not have."""

    NAME = "fused_lion"
    BUILD_VAR = "DS_BUILD_FUSED_LION"
    kernels_class = kernels.FusedLionKernels


class ShareMemCommBuilder(AccelOpBuilder):
    """DeepSpeed's ``ShareMemCommBuilder``: ``initialize`` plus the
    ``torch.ops.deepspeed.inference_all_reduce(_)`` ops, on accel's shared memory."""

    NAME = "deepspeed_shm_comm"
    BUILD_VAR = "DS_BUILD_SHM_COMM"
    native_module = "accel.ops._shm_comm"

    def _kernels(self) -> Any:
        comm_ops.register_ops()
        return _single(comm_ops.ShmCommKernels, type(self).__name__)


class AsyncIOBuilder(AccelOpBuilder):
    """DeepSpeed's ``AsyncIOBuilder`` (ZeRO-Infinity's NVMe swapping) on :mod:`accel.io`:
    no libaio, no compiler."""

    NAME = "async_io"
    BUILD_VAR = "DS_BUILD_AIO"
    native_module = "accel.io"

    def _kernels(self) -> Any:
        from accel.integrations.deepspeed.aio import AsyncIOKernels

        return _single(AsyncIOKernels, type(self).__name__)


# Host-side kernels serve every device (ZeRO-Offload steps on the host whatever the
# accelerator); the fused and comm ones replace DeepSpeed's only on the CPU. The names
# live in _support, which `accel report` reads without importing deepspeed.
_ALL = {
    builder.__name__: builder
    for builder in (
        AsyncIOBuilder, CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder, FusedAdamBuilder,
        FusedLionBuilder, ShareMemCommBuilder,
    )
}  # fmt: skip
_HOST_BUILDERS = {name: _ALL[name] for name in HOST_BUILDERS}
_CPU_BUILDERS = {name: _ALL[name] for name in CPU_BUILDERS}


def accel_builders(device_type: str) -> dict[str, type[AccelOpBuilder]]:
    """accel's builders for DeepSpeed on ``device_type``, by DeepSpeed class name."""
    return dict(_CPU_BUILDERS if device_type == "cpu" else _HOST_BUILDERS)


def accel_builder(device_type: str, class_name: str) -> type[AccelOpBuilder] | None:
    """accel's builder named ``class_name`` for ``device_type``, or ``None``."""
    table = _CPU_BUILDERS if device_type == "cpu" else _HOST_BUILDERS
    return table.get(class_name)
