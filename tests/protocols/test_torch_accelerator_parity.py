"""Every name of the installed torch's ``torch.accelerator`` has an accel counterpart.

Each name is either mapped (a member of a capability protocol, a function of
``accel.functions``, or both) or has a reason, one sentence, in :data:`REASONS`. A name a
new torch adds fails here until it is served or explained.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
from typing_extensions import get_protocol_members

import accel
import accel.functions
from accel.backends.cpu import CPUAccelerator
from accel.protocols import (
    CAPABILITIES,
    AccumulatedStatsAPI,
    DeviceAPI,
    DeviceCapabilityAPI,
    GraphObjectAPI,
    HostCacheAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
    SetStreamAPI,
    StreamAPI,
)

# name -> (the capability protocol whose member it is, or None; whether accel.functions has
# it under the same name).
MAPPED: dict[str, tuple[type | None, bool]] = {
    "Graph": (GraphObjectAPI, False),
    "current_accelerator": (None, True),
    "current_device_index": (None, True),
    "current_stream": (StreamAPI, True),
    "device_count": (DeviceAPI, True),
    "device_index": (None, True),
    "empty_cache": (MemoryUsageAPI, True),
    "empty_host_cache": (HostCacheAPI, True),
    "get_device_capability": (DeviceCapabilityAPI, True),
    "get_memory_info": (MemoryInfoAPI, True),
    "is_available": (DeviceAPI, True),
    "max_memory_allocated": (MemoryStatsAPI, True),
    "max_memory_reserved": (MemoryStatsAPI, True),
    "memory_allocated": (MemoryUsageAPI, True),
    "memory_reserved": (MemoryUsageAPI, True),
    "memory_stats": (MemoryStatsAPI, True),
    "reset_accumulated_memory_stats": (AccumulatedStatsAPI, True),
    "reset_peak_memory_stats": (MemoryStatsAPI, True),
    "set_device_index": (None, True),
    "set_stream": (SetStreamAPI, True),
    "synchronize": (DeviceAPI, True),
}

REASONS = {
    "current_device_idx": "torch deprecated it for current_device_index, which accel has.",
    "set_device_idx": "torch deprecated it for set_device_index, which accel has.",
}


def _torch_names() -> dict[str, Callable[..., Any]]:
    names = {name: getattr(torch.accelerator, name) for name in torch.accelerator.__all__}
    try:
        memory = importlib.import_module("torch.accelerator.memory")
    except ImportError:  # an older torch
        return names
    names.update({name: getattr(memory, name) for name in getattr(memory, "__all__", [])})
    return names


TORCH_NAMES = _torch_names()


def test_every_torch_accelerator_name_is_mapped_or_has_a_reason() -> None:
    unserved = sorted(set(TORCH_NAMES) - set(MAPPED) - set(REASONS))
    assert not unserved, f"torch.accelerator names without an accel counterpart: {unserved}"
    assert not set(MAPPED) & set(REASONS)
    assert set(REASONS) <= set(TORCH_NAMES), "a reason for a name torch no longer has"
    for name, reason in REASONS.items():
        assert reason[0].isalpha(), f"{name}: {reason!r} is no sentence"
        assert reason.endswith("."), f"{name}: {reason!r} is no sentence"


def _accel_callables(name: str) -> list[Callable[..., Any]]:
    protocol, function = MAPPED[name]
    found: list[Callable[..., Any]] = []
    if protocol is not None:
        assert protocol in CAPABILITIES, f"{name}: {protocol.__name__} is no capability"
        assert name in get_protocol_members(protocol), f"{name} is not in {protocol.__name__}"
        found.append(getattr(protocol, name))
    if function:
        assert name in accel.functions.__all__, f"accel.functions has no {name}"
        assert name in accel.__all__, f"accel has no {name}"
        found.append(getattr(accel.functions, name))
    assert found, f"{name} is mapped to nothing"
    return found


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_the_counterpart_takes_what_torch_takes(name: str) -> None:
    """Same meaning, as far as a signature shows it: every positional argument torch takes
    has a place, and every keyword-only one a parameter of the same name."""
    assert name in TORCH_NAMES, f"{name} is mapped but torch has no such name"
    original = TORCH_NAMES[name]
    theirs = inspect.signature(original.__init__ if isinstance(original, type) else original)
    their_params = [p for p in theirs.parameters.values() if p.name != "self"]
    positional = [p for p in their_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = {p.name for p in their_params if p.kind is p.KEYWORD_ONLY}
    for counterpart in _accel_callables(name):
        ours = [
            p for p in inspect.signature(counterpart).parameters.values()
            if p.name not in ("self", "accelerator")
        ]  # fmt: skip
        our_positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert len(our_positional) >= len(positional), (name, counterpart, theirs)
        assert keyword_only <= {p.name for p in ours}, (name, counterpart, theirs)


# The functions whose first parameter is a device, in any form torch takes.
DEVICE_FUNCTIONS = [
    "synchronize", "memory_allocated", "memory_reserved", "max_memory_allocated",
    "max_memory_reserved", "memory_stats", "reset_peak_memory_stats", "get_memory_info",
    "get_device_capability", "reset_accumulated_memory_stats",
]  # fmt: skip


@pytest.mark.parametrize("name", DEVICE_FUNCTIONS)
def test_a_device_is_taken_in_every_form_torch_takes(name: str, fresh_selection: None) -> None:
    # The protocols' members take an index; torch.accelerator's functions a torch.device,
    # a "type:index" string, an index or None, and so do accel's.
    accel.set_accelerator(CPUAccelerator())
    function = getattr(accel, name)
    answers = [function(device) for device in (None, 0, "cpu", "cpu:0", torch.device("cpu", 0))]
    assert all(type(answer) is type(answers[0]) for answer in answers), answers
    with pytest.raises(ValueError, match="must be a cpu device, got 'cuda:0'"):
        function("cuda:0")
    with pytest.raises(TypeError):
        function(1.0)


def test_the_functions_answer_as_torch_would_on_the_cpu(fresh_selection: None) -> None:
    acc = CPUAccelerator()
    accel.set_accelerator(acc)
    free, total = accel.get_memory_info()
    assert 0 < free <= total == acc.total_memory()
    assert accel.current_device_index() == acc.current_device()
    accel.set_device_index(1)
    assert accel.current_device_index() == 1
    # A negative index (and None, for the context manager) leaves the current device, as
    # in torch.accelerator and torch.cuda; it was a ValueError (ported Megatron code, whose
    # RNG helpers pass device=-1, failed).
    accel.set_device_index(-1)
    accel.set_device(-1)
    for device in (-1, None):
        with accel.device_index(device):
            assert accel.current_device_index() == 1
    assert accel.current_device_index() == 1
    with pytest.raises(ValueError, match="non-negative"):
        acc.set_device(-1)  # the protocol member keeps its contract
    assert accel.current_accelerator() == torch.device("cpu")
    assert accel.current_accelerator(check_available=True) == torch.device("cpu")
    dtypes = accel.get_device_capability()["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= dtypes
    assert all(isinstance(dtype, torch.dtype) for dtype in dtypes)
