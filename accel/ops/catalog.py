"""Every op accel ships prebuilt, one row each: the only place facts about an op live.

accel's own op builders (:mod:`accel.ops.prebuilt`, what ``acc.create_op_builder(name)``
returns) and the DeepSpeed integration's (:mod:`accel.integrations.deepspeed.op_builders`)
are made from these rows, and ``accel report`` reads them. Adding an op is one row here
plus its kernels. Importing this module costs nothing: no torch, no extension, no
deepspeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from accel.ops.requirements import POSIX, Imports, Installed, OSFunctions, Requirement


@dataclass(frozen=True)
class DeepSpeedOp:
    """How the DeepSpeed integration stands in for one of DeepSpeed's builders."""

    name: str
    """The ``NAME`` of DeepSpeed's builder (``"cpu_adam"``)."""
    build_var: str
    """Its ``BUILD_VAR``, the variable that asks ``pip install deepspeed`` to compile it."""
    kernels: str
    """``"module:Class"`` of the object ``load()`` returns (one per process, as a compiled
    module is): DeepSpeed's module API over accel's kernels. Its class takes DeepSpeed's
    own build as a fallback (:class:`accel.integrations.deepspeed.kernels.DeepSpeedModule`)."""


@dataclass(frozen=True)
class PrebuiltOp:
    """One prebuilt op: its names, where its code lives, what it needs and who serves it."""

    builder: str
    """The builder's class name, spelt as DeepSpeed spells it (``"CPUAdamBuilder"``)."""
    op_name: str
    """accel's name for the op (``builder.name()``)."""
    summary: str
    """What the op does, one sentence: the builder classes' docstring."""
    native_module: str
    """The module that must import for the op to be usable here."""
    module: str | None
    """The module accel's ``load()`` returns: the validating front door, never raw
    kernels. None: accel has no kernels of its own, and ``load()`` returns what DeepSpeed's CPU
    builder of the same class name builds (so such a row is CPU-only: ``host`` False)."""
    host: bool
    """True: the kernels run on the host, so every device backend offers the op (ZeRO-Offload
    steps optimizers on the host whatever the accelerator); False: only the CPU backend."""
    deepspeed: DeepSpeedOp | None
    """The DeepSpeed builder accel's integration replaces with this op; None where
    DeepSpeed keeps its own."""
    requires: tuple[Requirement, ...] = ()
    """What must hold besides ``native_module`` importing, checked first, in order."""


_CPU_OPTIM = "accel.ops._cpu_optim"
_CPU_OPTIM_API = "accel.ops.cpu_optim"
_DS = "accel.integrations.deepspeed"
_POSIX_FILE_IO = OSFunctions(("pwrite", "preadv"), needed_by="accel.io")


def _cpu_optimizer(builder: str, op_name: str, summary: str, *, host: bool) -> PrebuiltOp:
    """A row of accel's CPU optimizer kernels, standing in for DeepSpeed's builder of the
    same op name. DeepSpeed names each optimizer builder's ``BUILD_VAR``
    ``DS_BUILD_<OP_NAME>``; the module API is ``<Name>Kernels`` for ``<Name>Builder`` in
    :mod:`accel.integrations.deepspeed.kernels`."""
    build_var = f"DS_BUILD_{op_name.upper()}"
    kernels = builder.removesuffix("Builder") + "Kernels"
    return PrebuiltOp(
        builder, op_name, summary, native_module=_CPU_OPTIM, module=_CPU_OPTIM_API, host=host,
        deepspeed=DeepSpeedOp(op_name, build_var, f"{_DS}.kernels:{kernels}"),
    )  # fmt: skip


PREBUILT_OPS: tuple[PrebuiltOp, ...] = (
    PrebuiltOp(
        "AsyncIOBuilder", "async_io",
        "Asynchronous tensor file I/O (accel.io, ZeRO-Infinity's NVMe swapping): threads in "
        "pread/pwrite, which release the GIL; no libaio, nothing compiled.",
        native_module="accel.io", module="accel.io", host=True,
        deepspeed=DeepSpeedOp("async_io", "DS_BUILD_AIO", f"{_DS}.aio:AsyncIOKernels"),
        requires=(_POSIX_FILE_IO,),
    ),
    _cpu_optimizer(
        "CPUAdamBuilder", "cpu_adam", "Adam and AdamW steps on the CPU (ZeRO-Offload).", host=True
    ),
    _cpu_optimizer("CPUAdagradBuilder", "cpu_adagrad", "Adagrad steps on the CPU.", host=True),
    _cpu_optimizer("CPULionBuilder", "cpu_lion", "Lion steps on the CPU.", host=True),
    _cpu_optimizer(
        "FusedAdamBuilder", "fused_adam",
        "DeepSpeed's FusedAdam on the CPU: the same multi-tensor Adam kernel.", host=False
    ),
    _cpu_optimizer(
        "FusedLionBuilder", "fused_lion",
        "Multi-tensor Lion on the CPU (lion_step takes every tensor in one call), the CPU "
        "kernel DeepSpeed's FusedLion lacks.", host=False
    ),
    PrebuiltOp(
        "PinMemoryBuilder", "pin_memory",
        "Page-locked host buffers, one registry per process (accel.io.locked, mlock through "
        "ctypes; the manager accel's aio_handle shares, as DeepSpeed's does).",
        native_module="accel.io", module="accel.io.locked", host=True,
        deepspeed=DeepSpeedOp(
            "pin_memory", "DS_BUILD_PIN_MEMORY", f"{_DS}.pin_memory:PinMemoryKernels"
        ),
        requires=(POSIX("page-locking needs POSIX mlock(2)"),),
    ),
    PrebuiltOp(
        "ShareMemCommBuilder", "shm_comm",
        "Shared-memory all-reduce for the ranks of one node (accel.comm.all_reduce_; for "
        "DeepSpeed, torch.ops.deepspeed.inference_all_reduce(_)).",
        native_module="accel.ops._shm_comm", module="accel.comm", host=False,
        deepspeed=DeepSpeedOp(
            "deepspeed_shm_comm", "DS_BUILD_SHM_COMM", f"{_DS}.comm_ops:ShmCommKernels"
        ),
    ),
    PrebuiltOp(
        "CCLCommBuilder", "ccl_comm",
        "DeepSpeed's oneCCL comm module: with oneCCL's torch bindings installed, load() "
        "returns what DeepSpeed's builder compiles, as without accel.",
        native_module="oneccl_bindings_for_pytorch", module=None, host=False,
        deepspeed=None,  # accel has no oneCCL kernels to stand in with
        requires=(
            Imports("oneccl_bindings_for_pytorch", described_as="oneCCL's torch bindings"),
            Installed(
                "deepspeed", why="the oneCCL comm module is DeepSpeed's CCLCommBuilder"
            ),
        ),
    ),
)  # fmt: skip

_BY_BUILDER = {op.builder: op for op in PREBUILT_OPS}


def prebuilt_op(builder: str) -> PrebuiltOp:
    """The row of the builder class named ``builder``.

    Args:
        builder: a builder class name, as DeepSpeed spells it (``"CPUAdamBuilder"``).

    Returns:
        The op's row.

    Raises:
        KeyError: accel ships no op of that builder name.
    """
    try:
        return _BY_BUILDER[builder]
    except KeyError:
        raise KeyError(
            "a builder name must be one of accel's prebuilt ops "
            f"({', '.join(sorted(_BY_BUILDER))}), got {builder!r}"
        ) from None


def served_on(device_type: str) -> tuple[PrebuiltOp, ...]:
    """The ops accel offers when the device is ``device_type`` (``"cpu"``, ``"cuda"``, ...).

    Args:
        device_type: A torch device type.

    Returns:
        Every op on ``"cpu"``; on any other type, those whose kernels run on the host
        (``host``), in catalog order.
    """
    return tuple(op for op in PREBUILT_OPS if op.host or device_type == "cpu")


def deepspeed_builders(device_type: str) -> tuple[str, ...]:
    """The DeepSpeed builder classes accel's integration replaces on ``device_type``.

    Args:
        device_type: A torch device type.

    Returns:
        The class names, as DeepSpeed spells them, of the ops :func:`served_on` gives that
        stand in for a DeepSpeed builder (``deepspeed``).
    """
    return tuple(op.builder for op in served_on(device_type) if op.deepspeed is not None)


_Builder = TypeVar("_Builder")


def builder_attribute(module: str, builders: Mapping[str, _Builder], name: str) -> _Builder:
    """The ``__getattr__`` (PEP 562) of a module whose builder classes are made from the
    catalog, and so are not its globals.

    Args:
        module: The module's ``__name__``, for the error.
        builders: Its builder classes by name.
        name: The attribute asked for.

    Returns:
        ``builders[name]``.

    Raises:
        AttributeError: No builder of that name, as for any missing attribute.
    """
    builder = builders.get(name)
    if builder is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return builder
