"""The core ``Accelerator`` protocol, intersections with optional capabilities, and checks.

Every backend satisfies :class:`Accelerator`. Streams, graphs, profiler ranges, native
op builders, and every member added after the first release are optional: test for them
with ``isinstance(acc, GraphAPI)`` or with the ``supports_*`` helpers below, both of which
narrow the static type.

The members of :class:`Accelerator` are a contract with backend authors: they never
change in a way that turns a working backend into a non-backend (see "Protocol
evolution" in docs/architecture.md). :data:`API_VERSION` counts the additions.
"""

from __future__ import annotations

from typing_extensions import Protocol, TypeIs, get_protocol_members, runtime_checkable

from accel.protocols._fast import fast_protocol, static_member
from accel.protocols.device import DeviceAPI, DevicePropertiesAPI
from accel.protocols.dtype import DTypeAPI
from accel.protocols.graph import GraphAPI
from accel.protocols.memory import AccumulatedStatsAPI, MemoryAPI
from accel.protocols.op_builder import OpBuilderAPI
from accel.protocols.profiler import ProfilerAPI
from accel.protocols.rng import RNGAPI, ForkRNGAPI
from accel.protocols.runtime import RuntimeAPI
from accel.protocols.stream import StreamAPI
from accel.protocols.tensor import TensorAPI


@fast_protocol
@runtime_checkable
class Accelerator(DeviceAPI, RNGAPI, MemoryAPI, DTypeAPI, TensorAPI, RuntimeAPI, Protocol):
    """What every backend provides: devices, RNG, memory, dtypes, tensors and runtime."""


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
"""The capabilities every backend has, composed into :class:`Accelerator`."""

OPTIONAL_PROTOCOLS: tuple[type, ...] = (
    StreamAPI,
    GraphAPI,
    ProfilerAPI,
    OpBuilderAPI,
    DevicePropertiesAPI,
    ForkRNGAPI,
    AccumulatedStatsAPI,
)
"""The capabilities a backend may have; test with ``isinstance``."""

API_VERSION = 2
"""The version of the protocols, raised by one whenever a member or capability is added.

1: the first release. 2: :class:`DevicePropertiesAPI`, :class:`ForkRNGAPI` and
:class:`AccumulatedStatsAPI` (optional), and ``accel.set_device``/``device_index``/
``get_device_properties``/``fork_rng``/``reset_accumulated_memory_stats``, which work with
backends of every version. What :class:`Accelerator` requires has not changed since 1.
"""


def missing_members(obj: object, protocol: type = Accelerator) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks or has as non-callables.

    The one rule behind ``set_accelerator()``, backend discovery, ``accel report`` and the
    conformance kit, so all of them reject the same backends and name the same members.

    Args:
        obj: An instance or a class.
        protocol: The protocol whose members are looked up.

    Returns:
        The missing member names, sorted; empty when ``obj`` has them all.
    """
    return sorted(
        name for name in get_protocol_members(protocol) if not callable(static_member(obj, name))
    )


def supports_streams(acc: Accelerator) -> TypeIs[StreamAccelerator]:
    """Whether ``acc`` has streams and events; narrows ``acc`` to :class:`StreamAccelerator`.

    Args:
        acc: Any accelerator.

    Returns:
        ``isinstance(acc, StreamAPI)``.
    """
    return isinstance(acc, StreamAPI)


def supports_graphs(acc: Accelerator) -> TypeIs[GraphAccelerator]:
    """Whether ``acc`` captures graphs; narrows ``acc`` to :class:`GraphAccelerator`.

    Args:
        acc: Any accelerator.

    Returns:
        ``isinstance(acc, GraphAPI)``.
    """
    return isinstance(acc, GraphAPI)


def supports_profiler(acc: Accelerator) -> TypeIs[ProfilerAccelerator]:
    """Whether ``acc`` has profiler ranges; narrows ``acc`` to :class:`ProfilerAccelerator`.

    Args:
        acc: Any accelerator.

    Returns:
        ``isinstance(acc, ProfilerAPI)``.
    """
    return isinstance(acc, ProfilerAPI)


def supports_op_builders(acc: Accelerator) -> TypeIs[OpBuilderAccelerator]:
    """Whether ``acc`` ships op builders; narrows ``acc`` to :class:`OpBuilderAccelerator`.

    Args:
        acc: Any accelerator.

    Returns:
        ``isinstance(acc, OpBuilderAPI)``.
    """
    return isinstance(acc, OpBuilderAPI)
