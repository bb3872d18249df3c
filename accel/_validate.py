"""Argument and environment validation shared by every mixin and backend.

Each check raises an exception that names the argument (or variable), the value it got
and what it expected, so that a bad input is never silently coerced or ignored.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch

SEED_MIN = -(2**63)
SEED_END = 2**64


def _as_int(value: object, argument: str, expected: str) -> int:
    # bool is an int subclass, but True as a device index is always a mistake.
    if isinstance(value, bool):
        raise TypeError(f"{argument} must be {expected}, got bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{argument} must be {expected}, got {type(value).__name__} {value!r}"
        ) from None


def check_index(value: object, argument: str = "device_index") -> int:
    """``value`` as an ``int`` >= 0, else ``TypeError``/``ValueError`` naming ``argument``."""
    index = _as_int(value, argument, "a non-negative int")
    if index < 0:
        raise ValueError(f"{argument} must be a non-negative int, got {index}")
    return index


def check_positive(value: object, argument: str) -> int:
    """``value`` as an ``int`` >= 1, else ``TypeError``/``ValueError`` naming ``argument``."""
    number = _as_int(value, argument, "a positive int")
    if number < 1:
        raise ValueError(f"{argument} must be a positive int, got {number}")
    return number


def check_device(value: object, device_type: str, argument: str = "device_index") -> int | None:
    """The index named by an ``int``, ``"<type>[:<index>]"`` or ``torch.device``.

    ``None`` for a device of ``device_type`` without an index. ``ValueError`` naming the
    argument for a device of another type or an unparsable string, ``TypeError`` for
    anything else.
    """
    import torch

    if isinstance(value, str):
        try:
            value = torch.device(value)
        except RuntimeError:
            raise ValueError(
                f"{argument} must name a {device_type} device such as '{device_type}:0', "
                f"got {value!r}"
            ) from None
    if isinstance(value, torch.device):
        if value.type != device_type:
            raise ValueError(
                f"{argument} must be a {device_type} device, got {str(value)!r} "
                f"(this accelerator's devices are {device_type!r})"
            )
        return value.index
    return check_index(value, argument)


def check_optional_index(value: object, argument: str = "device_index") -> int | None:
    """Like :func:`check_index`, but ``None`` (meaning "the current device") passes through."""
    return None if value is None else check_index(value, argument)


def check_seed(seed: object) -> int:
    """A seed torch accepts: an ``int`` in ``[-2**63, 2**64)``."""
    value = _as_int(seed, "seed", "an int")
    if not SEED_MIN <= value < SEED_END:
        raise ValueError(f"seed must be in [-2**63, 2**64), got {value}")
    return value


def check_str(value: object, argument: str) -> str:
    """``value`` if it is a ``str``, else a ``TypeError`` naming ``argument``."""
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, got {type(value).__name__} {value!r}")
    return value


def check_tensor(value: object, argument: str = "tensor") -> torch.Tensor:
    """``value`` if it is a ``torch.Tensor``, else a ``TypeError`` naming ``argument``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor, got {type(value).__name__} {value!r}")
    return value


def check_int(value: object, argument: str) -> int:
    """An integer (``__index__``: NumPy's too), not a bool, float or string."""
    return _as_int(value, argument, "an int")


def check_memory_holds_values(tensor: torch.Tensor, argument: str) -> None:
    """For native code that reads or writes ``tensor`` by address: its memory must hold
    its values and be its own. A lazy negative or conjugate view's memory holds the values
    before the negation; a tensor past its storage's end (the storage shrunk, as FSDP and
    ZeRO-3 free parameters, or left smaller by a refused resize) reaches someone else's
    bytes. ``ValueError`` naming ``argument`` otherwise."""
    if tensor.is_neg() or tensor.is_conj():
        raise ValueError(
            f"{argument} is a lazy negative or conjugate view whose memory does not hold its "
            "values; call .resolve_neg().resolve_conj() first"
        )
    extent = tensor.storage_offset() * tensor.element_size() + memory_extent(tensor)
    held = tensor.untyped_storage().nbytes()
    if tensor.numel() and extent > held:
        raise ValueError(
            f"{argument} reaches byte {extent} of its storage, which holds {held} bytes (the "
            "storage was shrunk, as FSDP and ZeRO-3 free parameters, or a refused resize "
            "left the shape larger); give it its memory back first"
        )


def check_dense_cpu(tensor: torch.Tensor, argument: str) -> None:
    """For native code that reads ``tensor`` by address: a strided (dense) CPU tensor;
    ``ValueError`` naming ``argument`` otherwise."""
    import torch  # callers hold tensors, so torch is loaded; this module does not import it

    if tensor.layout != torch.strided:
        raise ValueError(f"{argument} must be a dense tensor, got layout {tensor.layout}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{argument} must be on the CPU, got {tensor.device}")


def check_writable(tensor: torch.Tensor, argument: str) -> None:
    """For a tensor updated in place: torch lets us (an inference tensor only inside
    ``torch.inference_mode()``); ``ValueError`` naming ``argument`` otherwise."""
    import torch  # callers hold tensors, so torch is loaded; this module does not import it

    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{argument} is an inference tensor: torch refuses to update it in place outside "
            "torch.inference_mode()"
        )


def memory_extent(tensor: torch.Tensor) -> int:
    """Bytes from ``tensor``'s first element to the end of its last, in memory (torch's
    strides are never negative); 0 for an empty tensor."""
    if tensor.numel() == 0:
        return 0
    if tensor.is_contiguous():
        return tensor.numel() * tensor.element_size()
    last = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    return (last + 1) * tensor.element_size()


def check_no_self_overlap(tensor: torch.Tensor, argument: str) -> None:
    """For a tensor written element by element (by native code, or by a copy into it): no
    two of its elements share memory, as an ``expand``ed view's do. ``ValueError`` naming
    ``argument`` otherwise. (With its dimensions ordered by stride, each stride must pass
    everything the smaller ones reach: a layout that interleaves them in another way is
    refused too.)"""
    if tensor.numel() == 0:
        return
    reach = 0  # the farthest offset, in elements, the smaller strides reach
    for stride, size in sorted(
        (st, sz) for sz, st in zip(tensor.shape, tensor.stride(), strict=True) if sz > 1
    ):
        if stride <= reach:
            raise ValueError(
                f"{argument} has elements that share memory (shape {tuple(tensor.shape)}, "
                f"strides {tuple(tensor.stride())}, an expanded view say); give it memory of "
                "its own, e.g. with .clone()"
            )
        reach += (size - 1) * stride


def check_disjoint(
    written: Sequence[tuple[torch.Tensor, str]], read: Sequence[tuple[torch.Tensor, str]] = ()
) -> None:
    """For native code that updates tensors in place in parallel: no tensor in ``written``
    shares a byte of memory with another tensor of either sequence (each with its
    argument's name), as far as their extents (:func:`memory_extent`) tell, so two views
    that interleave are refused as well; tensors in ``read`` may share memory with each
    other. ``ValueError`` naming two that do, the one given first first."""
    named = [*written, *read]
    spans: list[Span] = []
    for index, (tensor, _) in enumerate(named):
        if tensor.numel():
            start = tensor.data_ptr()
            spans.append((start, start + memory_extent(tensor), index, index < len(written)))
    require_disjoint_spans(spans, lambda index: named[index][1])


Span = tuple[int, int, int, bool]
"""A tensor's bytes ``[start, end)``, a key that names it, and whether it is written."""


def require_disjoint_spans(spans: list[Span], name: Callable[[int], str]) -> None:
    """:func:`check_disjoint` over spans, sorted in place; ``name(key)`` names a span for
    the error (made only then), the lower key first. One sweep: a span clashes with an
    earlier one exactly when it starts before the farthest end so far, of every span if
    it is written, of the written ones if it is read."""
    spans.sort()
    farthest = farthest_written = (0, -1)  # (end, key)
    for start, end, key, written in spans:
        clash = farthest if written else farthest_written
        if start < clash[0]:
            low, high = sorted((clash[1], key))
            raise ValueError(
                f"{name(low)} and {name(high)} overlap in memory; each tensor needs its own storage"
            )
        if end > farthest[0]:
            farthest = (end, key)
        if written and end > farthest_written[0]:
            farthest_written = (end, key)


def check_index_list(values: object, argument: str) -> list[int]:
    """A sequence of distinct non-negative ``int`` device ids."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(
            f"{argument} must be a sequence of non-negative ints, "
            f"got {type(values).__name__} {values!r}"
        )
    items = cast("Sequence[object]", values)
    ids = [check_index(v, f"{argument}[{i}]") for i, v in enumerate(items)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{argument} must not repeat an id, got {ids}")
    return ids


# Environment integers and id lists are written by people and launchers: accept plain ASCII
# decimal digits only. int() alone would also take "3_000", "+3", a full-width "3" (U+FF13) or "²"
# (which isdigit() calls a digit but int() rejects), and any magnitude.
ENV_INT_MAX = 2**31 - 1


def _is_decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def env_switch(name: str, default: bool) -> bool:
    """Environment variable ``name`` as an on/off switch: ``"1"`` or ``"0"`` (around
    spaces), ``default`` when unset; anything else is a ``ValueError`` naming it."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.strip() not in ("0", "1"):
        raise ValueError(f"environment variable {name} must be 0 or 1, got {raw!r}")
    return raw.strip() == "1"


def env_index(name: str) -> int | None:
    """Environment variable ``name`` as a non-negative ``int``, or ``None`` when unset."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    return parse_env_index(name, raw)


@functools.lru_cache(maxsize=64)
def parse_env_index(name: str, raw: str) -> int:
    """``raw``, the text of environment variable ``name``, as a non-negative ``int``."""
    # Per-step callers (current_device reads LOCAL_RANK) see the same text every time:
    # parse it once. Errors are not cached: lru_cache stores only returned values.
    text = raw.strip()
    if not _is_decimal(text) or int(text) > ENV_INT_MAX:
        raise ValueError(
            f"environment variable {name} must be a non-negative decimal integer "
            f"up to {ENV_INT_MAX}, got {raw!r}"
        )
    return int(text)


def parse_id_list(raw: str, source: str, *, below: int | None = None) -> list[int]:
    """Ids from ``"0,2-3, 8"`` in the order written: ``[0, 2, 3, 8]``.

    The one parser for every id list (visible NUMA nodes, the kernel's cpulist files,
    ``--bind-core-list``): ASCII decimal ids and inclusive ranges, no repeats. ``source``
    names where the text came from in every error. ``below``, when given, bounds the ids
    and is checked on a range's ends before it is expanded, so ``"0-10000000000"`` fails
    at once. Linear in the number of ids.
    """
    text = raw.strip()
    if not text:
        return []
    ids: list[int] = []
    seen: set[int] = set()
    repeated: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        first, dash, last = item.partition("-")
        if not _is_decimal(first) or (dash and not _is_decimal(last)):
            raise ValueError(
                f"{source} must be comma-separated ids and ranges such as '0-3,8', "
                f"got {raw!r} (bad item {item!r})"
            )
        start, end = int(first), int(last) if dash else int(first)
        if end < start:
            raise ValueError(f"{source}: range {item!r} in {raw!r} ends before it starts")
        if below is not None and end >= below:
            raise ValueError(
                f"{source}: {item!r} in {raw!r} goes past {below - 1}, the highest id allowed here"
            )
        for value in range(start, end + 1):
            if value in seen:
                repeated.append(value)
            else:
                seen.add(value)
                ids.append(value)
    if repeated:
        raise ValueError(
            f"{source} must not repeat an id; {format_id_list(repeated)} repeat in {raw!r}"
        )
    return ids


def format_id_list(ids: Iterable[int]) -> str:
    """The inverse of :func:`parse_id_list` for sorted ids: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts: list[str] = []
    ordered = sorted(set(ids))
    start = 0
    for index, value in enumerate(ordered):
        if index + 1 == len(ordered) or ordered[index + 1] != value + 1:
            first = ordered[start]
            parts.append(str(first) if first == value else f"{first}-{value}")
            start = index + 1
    return ",".join(parts)


def check_rng_state(value: object) -> torch.Tensor:
    """A generator state as :meth:`torch.Generator.get_state` returns it (1-D uint8, CPU)."""
    import torch

    state = check_tensor(value, "new_state")
    if state.dtype != torch.uint8 or state.device.type != "cpu" or state.dim() != 1:
        raise TypeError(
            "new_state must be a 1-D torch.uint8 CPU tensor from get_rng_state(), got "
            f"{state.dim()}-D {state.dtype} on {state.device}"
        )
    return state
