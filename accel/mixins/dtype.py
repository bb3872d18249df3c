"""DTypeAPI implementations: the dtype list derived from the answers, and torch probes."""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar

import torch
from typing_extensions import Protocol

from accel._device_module import device_module
from accel._signatures import takes_keyword
from accel._validate import check_optional_index
from accel.protocols._contract import implements
from accel.protocols.device import DeviceCapabilityAPI
from accel.protocols.dtype import DTypeAPI


class _DTypeAnswers(Protocol):
    def is_bf16_supported(self) -> bool: ...
    def is_fp16_supported(self) -> bool: ...


@implements(DTypeAPI)
class DTypeListMixin:
    """Keeps ``supported_dtypes()`` consistent with ``is_bf16/fp16_supported()`` by construction."""

    def supported_dtypes(self: _DTypeAnswers) -> list[torch.dtype]:
        """``float32``, then ``bfloat16`` and ``float16`` where supported."""
        dtypes = [torch.float32]
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        return dtypes


@functools.cache
def matmul_runs(device_type: str, dtype: torch.dtype) -> bool:
    """Whether a small matmul in ``dtype`` gives the right answer on ``device_type``.

    Cached per argument pair.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.
        dtype: The floating-point type to try.

    Returns:
        ``True`` when a 4x4 matmul gives the exact answer; ``False`` when it gives another
        or torch raises ``RuntimeError``, ``TypeError`` or ``NotImplementedError``.
    """
    try:
        a = torch.full((4, 4), 0.5, dtype=dtype, device=device_type)
        return bool(torch.equal((a @ a).float().cpu(), torch.ones(4, 4)))
    except (RuntimeError, TypeError, NotImplementedError):
        return False


@functools.cache
def triton_runs_on(device_type: str) -> bool:
    """Whether Triton is installed and torch's inductor accepts it for ``device_type``.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        ``True`` when ``torch.utils._triton.has_triton()`` is and ``device_type`` is
        ``"cuda"`` or ``"xpu"``.
    """
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    if not has_triton():
        return False
    return device_type in ("cuda", "xpu")


@implements(DTypeAPI)
class TorchDTypeMixin:
    """bf16 from ``torch.<type>.is_bf16_supported()`` when it exists; fp16 by probe."""

    device_type: ClassVar[str]

    def is_bf16_supported(self) -> bool:
        """``torch.<type>.is_bf16_supported()`` (native support only, where it can say) where it
        exists, else a probe matmul."""
        native = getattr(device_module(self.device_type), "is_bf16_supported", None)
        if callable(native):
            # Native support only, as on CUDA: torch.xpu.is_bf16_supported() counts emulated
            # bf16 by default (torch/xpu/__init__.py: including_emulation=True).
            if takes_keyword(native, "including_emulation"):
                return bool(native(including_emulation=False))
            return bool(native())
        return matmul_runs(self.device_type, torch.bfloat16)

    def is_fp16_supported(self) -> bool:
        """By a probe matmul (:func:`matmul_runs`)."""
        return matmul_runs(self.device_type, torch.float16)

    def is_triton_supported(self) -> bool:
        return triton_runs_on(self.device_type)


# Quantized tensors are made by quantizing, not by factories (which torch deprecates for them).
_QUANTIZED = {
    getattr(torch, name)
    for name in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    if hasattr(torch, name)
}


@functools.cache
def allocatable_dtypes(device_type: str) -> frozenset[torch.dtype]:
    """The dtypes a tensor on ``device_type`` can be made in and copied to the host in
    (quantized dtypes left out).

    Cached per device type: it makes one one-element tensor per torch dtype.

    Args:
        device_type: A torch device type, e.g. ``"cpu"``.

    Returns:
        The dtypes that worked.
    """
    found: set[torch.dtype] = set()
    for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)} - _QUANTIZED:
        try:
            with warnings.catch_warnings():  # "ComplexHalf support is experimental": asked
                warnings.simplefilter("ignore", UserWarning)
                torch.zeros(1, dtype=dtype, device=device_type).cpu()
        except (RuntimeError, TypeError, NotImplementedError):  # torch's "not implemented for"
            continue
        found.add(dtype)
    return frozenset(found)


@implements(DeviceCapabilityAPI)
class DeviceCapabilityMixin:
    """``get_device_capability`` as ``torch.accelerator.get_device_capability`` answers."""

    device_type: ClassVar[str]

    def get_device_capability(self, device_index: int | None = None) -> dict[str, Any]:
        """torch's own answer where this device type is torch's accelerator and torch has one; else
        ``{"supported_dtypes": ...}`` found by making a tensor in every dtype."""
        index = check_optional_index(device_index)
        current = torch.accelerator.current_accelerator()
        if current is not None and current.type == self.device_type:
            try:
                return dict(torch.accelerator.get_device_capability(index))
            except (RuntimeError, NotImplementedError):  # a device that implements no query
                pass
        return {"supported_dtypes": set(allocatable_dtypes(self.device_type))}
