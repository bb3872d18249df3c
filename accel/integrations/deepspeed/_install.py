"""Putting accel under DeepSpeed, before or after ``import deepspeed``.

DeepSpeed picks its accelerator in ``deepspeed.accelerator.real_accelerator`` and, when
``deepspeed.ops.op_builder`` is first imported, binds builder classes into module globals
(``deepspeed.ops.adam.cpu_adam.CPUAdamBuilder``, ...). So:

- before DeepSpeed is imported, :func:`install` has accel's start-up finder
  (:mod:`_accel_startup`, which ``ACCEL_DEEPSPEED=1`` arms the same way in every process)
  call :func:`accelerator_imported` the moment ``real_accelerator`` has run, so every
  later DeepSpeed import already sees accel;
- after, it sets the adapter and rebinds, in every loaded ``deepspeed`` module, the old
  accelerator object (and methods bound to it) and the builder classes accel replaces.

Nothing here imports torch or deepspeed at module level.
"""

from __future__ import annotations

import _thread
import os
import sys
from types import MethodType, ModuleType
from typing import TYPE_CHECKING, Any

from accel.integrations.deepspeed._support import (
    installed_version,
    requested,
    unsupported_reason,
    zero_pool_enabled,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

TARGET = "deepspeed.accelerator.real_accelerator"
REPORT = "deepspeed.env_report"  # ds_report's tables
COMM = "deepspeed.comm.torch"  # TorchBackend.inference_all_reduce (comm_ops.direct_...)
ZERO = "deepspeed.runtime.zero.stage_1_and_2"  # ZeRO-1/2's flat buckets (zero.pool_...)
_BUILDER_DEFINITIONS = "deepspeed.ops.op_builder."  # modules where DeepSpeed defines builders

_lock = _thread.RLock()
_active = False


def is_active() -> bool:
    """Whether DeepSpeed in this process runs on accel (its accelerator is accel's adapter)."""
    return _active


def is_armed() -> bool:
    """Whether the integration will activate when DeepSpeed is imported."""
    import _accel_startup  # accel-startup.pth imported it (unless Python ran with -S)

    return not _active and _accel_startup.HOOKS.watches(TARGET)


def check_supported() -> None:
    """``ImportError`` without deepspeed, ``RuntimeError`` naming the supported range for an
    unsupported release."""
    version = installed_version()
    reason = unsupported_reason(version)
    if reason is None:
        return
    if version is None:
        raise ImportError(f"accel's DeepSpeed integration needs deepspeed: {reason}")
    raise RuntimeError(reason)


def install() -> None:
    """Make DeepSpeed use accel's accelerator and prebuilt op builders (idempotent)."""
    with _lock:
        if _active:
            return
        check_supported()
        module = sys.modules.get(TARGET)
        if module is not None and getattr(module, "get_accelerator", None) is not None:
            activate(module)
        else:
            arm()


def arm() -> None:
    """Activate when ``deepspeed.accelerator.real_accelerator`` is next imported
    (idempotent): the start-up finder watches DeepSpeed's modules."""
    import _accel_startup

    _accel_startup.HOOKS.watch(
        _accel_startup.DEEPSPEED, "accel: DeepSpeed runs without accel in this process"
    )


def accelerator_imported(real_accelerator: ModuleType) -> None:
    """The start-up finder's hook for ``real_accelerator``: activate, after checking
    ``ACCEL_DEEPSPEED`` (a bad value raises ``ValueError`` naming it, here where the
    process imports deepspeed, rather than letting DeepSpeed run natively)."""
    requested()
    activate(real_accelerator)


def report_imported(report: ModuleType) -> None:
    """The start-up finder's hook for ``deepspeed.env_report`` (ds_report's tables)."""
    if _adapter is not None:
        _truthful_report(report, _adapter)


def comm_imported(torch_comm: ModuleType) -> None:
    """The start-up finder's hook for ``deepspeed.comm.torch``."""
    if _adapter is not None:
        _direct_comm(torch_comm)


def zero_imported(stage_1_and_2: ModuleType) -> None:
    """The start-up finder's hook for ``deepspeed.runtime.zero.stage_1_and_2``."""
    if _adapter is not None:
        _pool_zero(stage_1_and_2)


def _pool_zero(stage_1_and_2: ModuleType) -> None:
    optimizer = getattr(stage_1_and_2, "DeepSpeedZeroOptimizer", None)
    if isinstance(optimizer, type):  # None while the module is mid-import: its hook follows
        from accel.integrations.deepspeed.zero import pool_flat_buckets

        pool_flat_buckets(optimizer)


def _check_ds_accelerator_env(device: str) -> None:
    asked = os.environ.get("DS_ACCELERATOR")
    if asked is not None and asked != device:
        raise ValueError(
            f"DS_ACCELERATOR={asked!r} asks DeepSpeed for {asked!r}, but accel selected "
            f"{device!r} (set ACCEL_BACKEND={asked} to make accel choose it, or unset "
            "DS_ACCELERATOR)"
        )


def activate(real_accelerator: ModuleType) -> None:
    """Set accel's adapter as DeepSpeed's accelerator and rebind what DeepSpeed bound."""
    global _active
    with _lock:
        if _active:
            return
        check_supported()
        import accel
        from accel.integrations.deepspeed.adapter import AccelDeepSpeedAccelerator

        adapter = AccelDeepSpeedAccelerator(accel.get_accelerator())
        _check_ds_accelerator_env(adapter.device_name())
        zero_pool_enabled()  # a bad ACCEL_ZERO_POOL fails here, before anything changes
        previous: Any = getattr(real_accelerator, "ds_accelerator", None)
        real_accelerator.set_accelerator(adapter)
        if previous is not None and previous is not adapter:
            _rebind_accelerator(previous, adapter)
        _rebind_builders(adapter)
        report = sys.modules.get(REPORT)
        if report is not None:
            _truthful_report(report, adapter)
        torch_comm = sys.modules.get(COMM)
        if torch_comm is not None:
            _direct_comm(torch_comm)
        stage_1_and_2 = sys.modules.get(ZERO)
        if stage_1_and_2 is not None:
            _pool_zero(stage_1_and_2)
        _active = True
        global _adapter
        _adapter = adapter
        import logging

        logging.getLogger("accel.integrations.deepspeed").info("DeepSpeed runs on %r", adapter)


_adapter: Any = None  # the adapter once active, for modules imported after activation


def _direct_comm(torch_comm: ModuleType) -> None:
    # The module may be mid-import (DeepSpeed imports its accelerator from it): then the
    # hook's call, once it has executed, finds the class.
    backend = getattr(torch_comm, "TorchBackend", None)
    if isinstance(backend, type):
        from accel.integrations.deepspeed.comm_ops import direct_inference_all_reduce

        direct_inference_all_reduce(backend)


def _truthful_report(report: ModuleType, adapter: Any) -> None:
    """ds_report's "installed" column from the truth: accel's builders are installed (they
    were compiled when accel was installed), DeepSpeed's as DeepSpeed recorded them. Only
    the report's own copy changes: DeepSpeed's builders read the real table to decide
    whether to import a prebuilt module, and must keep reading DeepSpeed's answer."""
    from accel.integrations.deepspeed.op_builders import accel_builders

    served = {builder.NAME for builder in accel_builders(adapter.device_name()).values()}
    installed: dict[str, bool] = getattr(report, "installed_ops", {})
    recorded_for = getattr(report, "accelerator_name", "")
    setattr(report, "installed_ops", {  # noqa: B010  (a module DeepSpeed wrote, untyped)
        name: name in served or (was and recorded_for == adapter._name)
        for name, was in {**installed, **dict.fromkeys(served, False)}.items()
    })  # fmt: skip
    setattr(report, "accelerator_name", adapter._name)  # noqa: B010
    probe = getattr(report, "probe_is_compatible", None)
    if callable(probe) and not getattr(probe, "accel_truthful", False):
        setattr(report, "probe_is_compatible", _truthful_probe(probe))  # noqa: B010


CCL_NAME = "deepspeed_ccl_comm"


def ccl_build_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why DeepSpeed's oneCCL op cannot be JIT-built here, or None. Its builder compiles
    against ``$CCL_ROOT/include`` and links ``-lccl -L$CCL_ROOT/lib`` (raising ValueError
    without CCL_ROOT) but answers "compatible" without looking."""
    from pathlib import Path  # here: the start-up path stays free of pathlib

    root = (os.environ if environ is None else environ).get("CCL_ROOT")
    if not root:
        return "CCL_ROOT is not set (oneCCL's environment is not sourced)"
    base = Path(root)
    if not any((base / "include" / header).is_file() for header in ("oneapi/ccl.hpp", "ccl.hpp")):
        return f"CCL_ROOT={root} has no include/oneapi/ccl.hpp"
    if not any((base / "lib").glob("libccl.so*")):
        return f"CCL_ROOT={root} has no lib/libccl.so"
    return None


def _truthful_probe(probe: Callable[..., object]) -> Callable[..., bool]:
    """ds_report's "compatible" column with the oneCCL op's answer checked (only the
    report's copy of the probe: DeepSpeed's own table is untouched)."""

    def probe_is_compatible(builder: Any, verbose: bool = False) -> bool:
        if getattr(builder, "NAME", None) != CCL_NAME:
            return bool(probe(builder, verbose))
        problem = ccl_build_problem()
        if problem is not None and verbose:
            print(f"{CCL_NAME} is not compatible: {problem}")
        return problem is None and bool(probe(builder, verbose))

    probe_is_compatible.accel_truthful = True  # type: ignore[attr-defined]
    return probe_is_compatible


def _deepspeed_modules() -> list[ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        # sys.modules may hold None or lazy stand-ins despite its annotation.
        if (name == "deepspeed" or name.startswith("deepspeed.")) and isinstance(module, ModuleType)  # pyright: ignore[reportUnnecessaryIsInstance]
    ]


def _rebind_accelerator(previous: object, adapter: object) -> None:
    # Module-level captures such as deepspeed.runtime.utils.torch_memory_reserved =
    # get_accelerator().memory_reserved would otherwise keep asking DeepSpeed's backend.
    for module in _deepspeed_modules():
        for name, value in list(vars(module).items()):
            if value is previous:
                setattr(module, name, adapter)
            elif isinstance(value, MethodType) and value.__self__ is previous:
                setattr(module, name, getattr(adapter, value.__func__.__name__))


def _rebind_builders(adapter: Any) -> None:
    if "deepspeed.ops.op_builder" not in sys.modules:
        return  # nothing bound yet: DeepSpeed will ask the adapter when it binds them
    from accel.integrations.deepspeed.op_builders import accel_builders

    replacements = accel_builders(adapter.device_name())
    for module in _deepspeed_modules():
        if module.__name__.startswith(_BUILDER_DEFINITIONS):
            continue  # DeepSpeed's own classes stay where they are defined (the fallback)
        for name, builder in replacements.items():
            current = vars(module).get(name)
            if isinstance(current, type) and current is not builder:
                setattr(module, name, builder)
    all_ops = sys.modules.get("deepspeed.ops.op_builder.all_ops")
    if all_ops is not None:
        table: dict[str, Any] = all_ops.ALL_OPS
        for builder in replacements.values():
            if builder.NAME in table:
                table[builder.NAME] = builder()
    ops = sys.modules.get("deepspeed.ops")
    compatible: dict[str, bool] | None = vars(ops).get("__compatible_ops__") if ops else None
    if compatible is not None:  # probed already: DeepSpeed's answers were for its builders
        for builder in replacements.values():
            compatible[builder.NAME] = builder().is_compatible()
