"""The core ``Accelerator`` protocol, intersections with optional capabilities, and checks.

Every backend satisfies :class:`CoreAccelerator`, and every backend but those whose device
keeps no peak memory statistics (MPS on a torch that keeps none for it) satisfies
:class:`Accelerator`, which adds
:class:`MemoryStatsAPI`. Streams, graphs, profiler ranges, native op builders, and every
member added after the first release are optional: test for them with
``isinstance(acc, GraphAPI)`` or with the ``supports_*`` helpers below, both of which
narrow the static type. Each helper takes any accelerator ``acc`` and returns
``isinstance(acc, <protocol>)``, narrowing ``acc`` to the intersection its ``TypeIs``
names.

The members of :class:`Accelerator` are a contract with backend authors: they never
change in a way that turns a working backend into a non-backend (see "Protocol
evolution" in docs/architecture.md). :data:`API_VERSION` counts the additions.
"""

from __future__ import annotations

from typing_extensions import Protocol, TypeIs, get_protocol_members, runtime_checkable

from accel.protocols._fast import fast_protocol, static_member
from accel.protocols._unsupported import declared_absent
from accel.protocols.device import DeviceAPI, DeviceCapabilityAPI, DevicePropertiesAPI
from accel.protocols.dtype import DTypeAPI
from accel.protocols.graph import GraphAPI, GraphObjectAPI
from accel.protocols.memory import (
    AccumulatedStatsAPI,
    HostCacheAPI,
    MemoryAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
)
from accel.protocols.op_builder import OpBuilderAPI
from accel.protocols.profiler import ProfilerAPI
from accel.protocols.rng import RNGAPI, ForkRNGAPI
from accel.protocols.runtime import RuntimeAPI
from accel.protocols.stream import SetStreamAPI, StreamAPI
from accel.protocols.tensor import TensorAPI


@fast_protocol
@runtime_checkable
class CoreAccelerator(DeviceAPI, RNGAPI, MemoryUsageAPI, DTypeAPI, TensorAPI, RuntimeAPI, Protocol):
    """What every backend provides: devices, RNG, memory in use, dtypes, tensors and runtime.

    :class:`Accelerator` adds peak memory statistics; a backend whose device keeps none
    (MPS on a torch that keeps none for it) is a ``CoreAccelerator`` only.
    ``isinstance(acc, MemoryStatsAPI)`` and :func:`supports_memory_stats` tell them apart
    and narrow.
    """


@fast_protocol
@runtime_checkable
class Accelerator(DeviceAPI, RNGAPI, MemoryAPI, DTypeAPI, TensorAPI, RuntimeAPI, Protocol):
    """What backends provide: devices, RNG, memory with peak statistics, dtypes, tensors and
    runtime (the first release's members, unchanged).

    ``get_accelerator()`` is typed to return it, so that code written for the first release
    keeps type-checking. On a backend without peak memory statistics (a
    :class:`CoreAccelerator` only: MPS on a torch that keeps none for it) the
    :class:`MemoryStatsAPI` members raise ``CapabilityError``, as
    ``torch.accelerator.max_memory_allocated`` raises there; code that runs on such devices
    checks ``isinstance(acc, MemoryStatsAPI)`` first.
    """


@fast_protocol
@runtime_checkable
class StreamAccelerator(Accelerator, StreamAPI, Protocol):
    """An :class:`Accelerator` with streams and events."""


@fast_protocol
@runtime_checkable
class GraphAccelerator(Accelerator, GraphAPI, Protocol):
    """An :class:`Accelerator` that captures and replays graphs."""


@fast_protocol
@runtime_checkable
class ProfilerAccelerator(Accelerator, ProfilerAPI, Protocol):
    """An :class:`Accelerator` with profiler ranges."""


@fast_protocol
@runtime_checkable
class OpBuilderAccelerator(Accelerator, OpBuilderAPI, Protocol):
    """An :class:`Accelerator` that ships native op builders."""


CORE_PROTOCOLS: tuple[type, ...] = (DeviceAPI, RNGAPI, MemoryAPI, DTypeAPI, TensorAPI, RuntimeAPI)
"""The capabilities composed into :class:`Accelerator`. :class:`MemoryAPI` is
:class:`MemoryUsageAPI`, which every backend has, and :class:`MemoryStatsAPI`, which is
optional since API version 3."""


OPTIONAL_PROTOCOLS: tuple[type, ...] = (
    StreamAPI,
    GraphAPI,
    ProfilerAPI,
    OpBuilderAPI,
    DevicePropertiesAPI,
    ForkRNGAPI,
    AccumulatedStatsAPI,
    MemoryStatsAPI,
    MemoryInfoAPI,
    HostCacheAPI,
    SetStreamAPI,
    GraphObjectAPI,
    DeviceCapabilityAPI,
)
"""The capabilities a backend may have; test with ``isinstance``."""

CAPABILITIES: tuple[type, ...] = (*CORE_PROTOCOLS, MemoryUsageAPI, *OPTIONAL_PROTOCOLS)
"""Every capability, one row each in ``accel report`` and checked by the conformance kit."""

API_VERSION = 3
"""The version of the protocols, raised by one whenever a member or capability is added.

1: the first release. 2: :class:`DevicePropertiesAPI`, :class:`ForkRNGAPI` and
:class:`AccumulatedStatsAPI` (optional), and ``accel.set_device``/``device_index``/
``get_device_properties``/``fork_rng``/``reset_accumulated_memory_stats``, which work with
backends of every version. 3: :class:`MemoryAPI` split into :class:`MemoryUsageAPI` and
:class:`MemoryStatsAPI`, which a backend may declare absent (:class:`CoreAccelerator`);
:class:`MemoryInfoAPI`, :class:`HostCacheAPI`, :class:`SetStreamAPI`,
:class:`GraphObjectAPI` and :class:`DeviceCapabilityAPI` (optional), and the
``torch.accelerator`` names of ``accel.functions`` (``get_memory_info``,
``current_device_index``, ...). What :class:`Accelerator` requires has not changed since 1.
"""


def missing_members(obj: object, protocol: type = Accelerator) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks or has as non-callables.

    The one rule behind ``set_accelerator()``, backend discovery, ``accel report`` and the
    conformance kit, so all of them reject the same backends and name the same members.
    For :class:`Accelerator` (that rule), a member of :class:`MemoryStatsAPI` that ``obj``
    declares absent (``accel.mixins.NoMemoryStatsMixin``) is not missing: peak statistics
    are the one part of the first release's core that a device may lack, and only by saying
    so.

    Args:
        obj: An instance or a class.
        protocol: The protocol whose members are looked up.

    Returns:
        The missing member names, sorted; empty when ``obj`` has them all.
    """
    may_be_absent = (
        get_protocol_members(MemoryStatsAPI) if protocol is Accelerator else frozenset[str]()
    )
    return sorted(
        name
        for name in get_protocol_members(protocol)
        if not callable(static_member(obj, name))
        and not (name in may_be_absent and declared_absent(obj, name))
    )


def supports_memory_stats(acc: CoreAccelerator) -> TypeIs[Accelerator]:
    """Whether ``acc`` keeps peak memory statistics: ``isinstance(acc, MemoryStatsAPI)``."""
    return isinstance(acc, MemoryStatsAPI)


def supports_streams(acc: Accelerator) -> TypeIs[StreamAccelerator]:
    """Whether ``acc`` has streams and events: ``isinstance(acc, StreamAPI)``."""
    return isinstance(acc, StreamAPI)


def supports_graphs(acc: Accelerator) -> TypeIs[GraphAccelerator]:
    """Whether ``acc`` captures graphs: ``isinstance(acc, GraphAPI)``."""
    return isinstance(acc, GraphAPI)


def supports_profiler(acc: Accelerator) -> TypeIs[ProfilerAccelerator]:
    """Whether ``acc`` has profiler ranges: ``isinstance(acc, ProfilerAPI)``."""
    return isinstance(acc, ProfilerAPI)


def supports_op_builders(acc: Accelerator) -> TypeIs[OpBuilderAccelerator]:
    """Whether ``acc`` ships op builders: ``isinstance(acc, OpBuilderAPI)``."""
    return isinstance(acc, OpBuilderAPI)
