"""What accel serves where: one row per op accel ships prebuilt, as plain data.

Read by accel's own op builders (:mod:`accel.ops.prebuilt`, what
``acc.create_op_builder(name)`` returns), by the DeepSpeed integration's builders
(:mod:`accel.integrations.deepspeed.op_builders`) and by ``accel report``. Importing it
costs nothing: no torch, no extension, no deepspeed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrebuiltOp:
    """One prebuilt op: its names, where its code lives and which devices it serves."""

    builder: str
    """The builder's class name, spelt as DeepSpeed spells it (``"CPUAdamBuilder"``)."""
    op_name: str
    """accel's name for the op (``builder.name()``)."""
    native_module: str
    """The module that must import for the op to be usable here."""
    module: str
    """The module accel's ``load()`` returns: the validating front door, never raw kernels."""
    host: bool
    """True: the kernels run on the host, so every device backend offers the op (ZeRO-Offload
    steps optimizers on the host whatever the accelerator); False: only the CPU backend."""
    deepspeed_name: str | None
    """The ``NAME`` of the DeepSpeed builder accel's integration replaces with this op;
    None where DeepSpeed keeps its own builder."""


_CPU_OPTIM = "accel.ops._cpu_optim"

PREBUILT_OPS: tuple[PrebuiltOp, ...] = (
    PrebuiltOp("AsyncIOBuilder", "async_io", "accel.io", "accel.io", True, "async_io"),
    PrebuiltOp("CPUAdamBuilder", "cpu_adam", _CPU_OPTIM, "accel.ops.cpu_optim", True, "cpu_adam"),
    PrebuiltOp(
        "CPUAdagradBuilder", "cpu_adagrad", _CPU_OPTIM, "accel.ops.cpu_optim", True, "cpu_adagrad"
    ),
    PrebuiltOp("CPULionBuilder", "cpu_lion", _CPU_OPTIM, "accel.ops.cpu_optim", True, "cpu_lion"),
    PrebuiltOp(
        "FusedAdamBuilder", "fused_adam", _CPU_OPTIM, "accel.ops.cpu_optim", False, "fused_adam"
    ),
    PrebuiltOp(
        "FusedLionBuilder", "fused_lion", _CPU_OPTIM, "accel.ops.cpu_optim", False, "fused_lion"
    ),
    PrebuiltOp(
        "PinMemoryBuilder", "pin_memory", "accel.io", "accel.io.locked", True, "pin_memory"
    ),
    PrebuiltOp(
        "ShareMemCommBuilder", "shm_comm", "accel.ops._shm_comm", "accel.comm", False,
        "deepspeed_shm_comm",
    ),
    # accel has no oneCCL kernels: with oneCCL's bindings installed, load() hands over to
    # DeepSpeed's own builder; DeepSpeed keeps its builder either way.
    PrebuiltOp(
        "CCLCommBuilder", "ccl_comm", "oneccl_bindings_for_pytorch",
        "oneccl_bindings_for_pytorch", False, None,
    ),
)  # fmt: skip

_BY_BUILDER = {op.builder: op for op in PREBUILT_OPS}


def prebuilt_op(builder: str) -> PrebuiltOp:
    """The row of the builder class named ``builder`` (``KeyError`` when accel has none)."""
    return _BY_BUILDER[builder]


def served_on(device_type: str) -> tuple[PrebuiltOp, ...]:
    """The ops accel offers when the device is ``device_type`` (``"cpu"``, ``"cuda"``, ...)."""
    return tuple(op for op in PREBUILT_OPS if op.host or device_type == "cpu")


def deepspeed_builders(device_type: str) -> tuple[str, ...]:
    """The DeepSpeed builder classes accel's integration replaces on ``device_type``."""
    return tuple(op.builder for op in served_on(device_type) if op.deepspeed_name is not None)
