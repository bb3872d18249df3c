"""NVIDIA (and ROCm) GPUs through ``torch.cuda``: the most complete backend.

Everything generic comes from the torch-device mixins; what is CUDA's own is here:
NVML memory honouring ``CUDA_VISIBLE_DEVICES``, compute-capability gates, NVTX ranges,
and a probe that never creates a CUDA context.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import ClassVar

import torch
from typing_extensions import override

from accel._validate import check_optional_index, env_switch
from accel.backends import _cuda_visible
from accel.backends.base import Availability
from accel.backends.torch_device import TorchDeviceBackend
from accel.mixins import (
    NVTXProfilerMixin,
    OpBuilderTableMixin,
    TorchGraphMixin,
    TorchHostCacheMixin,
    TorchStreamMixin,
)
from accel.mixins.device import check_below_count
from accel.mixins.dtype import triton_runs_on
from accel.ops.table import PrebuiltOpBuilders
from accel.protocols._contract import implements
from accel.protocols.dtype import DTypeAPI
from accel.protocols.memory import MemoryUsageAPI
from accel.protocols.op_builder import OpBuilder
from accel.protocols.runtime import RuntimeAPI

logger = logging.getLogger(__name__)

ALLOW_DEPRECATED_FP16_ENV = "ACCEL_ALLOW_DEPRECATED_FP16"
_nvml_lock = threading.Lock()


@functools.cache
def _nvml() -> ModuleType | None:
    """``pynvml``, initialised once; ``None`` when NVML is missing or fails to start."""
    with _nvml_lock:
        try:
            import pynvml  # type: ignore[import-untyped]  # pyright: ignore[reportMissingTypeStubs]

            pynvml.nvmlInit()
        except Exception as error:  # pynvml raises NVMLError_* or ImportError/OSError
            logger.info("NVML unavailable (%s); free memory comes from torch.cuda", error)
            return None
        module: ModuleType = pynvml
        return module


def allow_deprecated_fp16() -> bool:
    """Whether ``ACCEL_ALLOW_DEPRECATED_FP16`` asks to treat compute capability 6.x as fp16.

    Returns:
        ``True`` for ``"1"``; ``False`` for ``"0"`` or when unset.

    Raises:
        ValueError: The variable is set to anything else.
    """
    return env_switch(ALLOW_DEPRECATED_FP16_ENV, default=False)


def fp16_allowed(capability: tuple[int, int]) -> bool:
    """fp16 needs tensor cores (7.0+); 6.x only with the override; older never.

    Args:
        capability: A device's compute capability, ``(major, minor)``.

    Returns:
        ``True`` for major 7 or above, and for major 6 when :func:`allow_deprecated_fp16`
        is.

    Raises:
        ValueError: The major version is 6 and ``ACCEL_ALLOW_DEPRECATED_FP16`` is set to
            neither ``"0"`` nor ``"1"``.
    """
    major = capability[0]
    return major >= 7 or (major == 6 and allow_deprecated_fp16())


@implements(MemoryUsageAPI, DTypeAPI, RuntimeAPI)
class CUDAAccelerator(
    TorchStreamMixin,
    TorchGraphMixin,
    TorchHostCacheMixin,
    NVTXProfilerMixin,
    OpBuilderTableMixin,
    TorchDeviceBackend,
):
    """CUDA devices: streams, graphs, NVTX, NVML-backed free memory, and the host-side op
    builders (async file I/O); device kernels are the framework's own."""

    name: ClassVar[str] = "cuda"
    priority: ClassVar[int] = 100
    device_type: ClassVar[str] = "cuda"
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ("CUDA_VISIBLE_DEVICES",)
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("NCCL", "CUDA", "TORCH_NCCL")
    op_builders: ClassVar[Mapping[str, type[OpBuilder]]] = PrebuiltOpBuilders("cuda")

    @classmethod
    @override
    def probe(cls) -> Availability:
        """Available when torch has CUDA and NVML counts a visible device; no CUDA context."""
        if torch.version.cuda is None and torch.version.hip is None:
            return Availability(False, "this torch build has no CUDA or ROCm support")
        # torch.cuda.device_count() asks NVML first (it honours CUDA_VISIBLE_DEVICES and
        # creates no context), so detection stays fork-safe; is_available() would not.
        count = torch.cuda.device_count()
        if count == 0:
            return Availability(False, "no CUDA device is visible")
        return Availability(True, f"{count} device(s)")

    @override
    def available_memory(self, device_index: int | None = None) -> int:
        """Free bytes from NVML (no CUDA context needed), else ``torch.cuda.mem_get_info``."""
        index = check_optional_index(device_index)
        torch_index = torch.cuda.current_device() if index is None else index
        nvml = _nvml()
        if nvml is not None:
            raw = os.environ.get(_cuda_visible.ENV)
            try:
                handle = _cuda_visible.nvml_handle(torch_index, raw, nvml)
                return int(nvml.nvmlDeviceGetMemoryInfo(handle).free)
            except (nvml.NVMLError, ValueError) as error:
                if index is not None:
                    # device_count() asks NVML (no context), honouring CUDA_VISIBLE_DEVICES.
                    check_below_count(index, torch.cuda.device_count(), "cuda")
                logger.info("NVML memory query failed (%s); asking torch.cuda", error)
        free, _total = torch.cuda.mem_get_info(torch_index)
        return int(free)

    @override
    def is_fp16_supported(self) -> bool:
        """Compute capability 7.0+ (6.x with ``ACCEL_ALLOW_DEPRECATED_FP16=1``)."""
        return fp16_allowed(torch.cuda.get_device_capability())

    @override
    def is_bf16_supported(self) -> bool:
        """Native bf16: compute capability 8.0+ (or ROCm).

        ``torch.cuda.is_bf16_supported()`` also counts emulated bf16 on older GPUs by
        default, which runs far slower than fp16 there; frameworks ask this question to
        pick a training dtype, so only native support counts.
        """
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))

    @override
    def is_triton_supported(self) -> bool:
        """Compute capability 8.0+ and Triton importable."""
        return torch.cuda.get_device_capability()[0] >= 8 and triton_runs_on("cuda")

    @override
    def communication_backend_name(self) -> str:
        """``nccl`` (``gloo`` on Windows, which has no NCCL)."""
        return "gloo" if sys.platform == "win32" else "nccl"


def nvml_driver_version() -> str | None:
    """The NVIDIA driver version NVML reports, or ``None`` without NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return str(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError:
        return None
