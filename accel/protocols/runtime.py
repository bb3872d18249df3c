"""RuntimeAPI: execution model, collectives backend, compiler and process environment."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


@fast_protocol
@runtime_checkable
class RuntimeAPI(Protocol):
    """How work runs on the device and how processes are set up to use it."""

    def is_synchronized_device(self) -> bool:
        """True when every op has finished when its call returns (no streams, no queues)."""
        ...

    def communication_backend_name(self) -> str:
        """The ``torch.distributed`` backend for this device, e.g. ``"nccl"`` or ``"gloo"``."""
        ...

    def get_compile_backend(self) -> str:
        """The ``torch.compile`` backend name to use on this device."""
        ...

    def set_compile_backend(self, backend: str) -> None:
        """Choose a ``torch.compile`` backend; raises ``ValueError`` for an unregistered name."""
        ...

    def visible_devices_envs(self) -> list[str]:
        """Names of the environment variables that restrict which devices a process sees."""
        ...

    def set_visible_devices_envs(
        self, current_env: MutableMapping[str, str], local_accelerator_ids: Sequence[int]
    ) -> None:
        """Write those variables into ``current_env`` so a child sees only the given devices."""
        ...

    def export_envs(self) -> list[str]:
        """Prefixes of environment variables a launcher must forward to remote ranks."""
        ...

    def lazy_call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the device runtime is initialised (at once if it already is)."""
        ...
