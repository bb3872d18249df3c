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
        """Whether the device has no streams to order work between: each op runs to
        completion when called (the CPU) or in call order on the device's one queue (MPS,
        where ``synchronize()`` still waits for that queue). DeepSpeed's meaning: such a
        device needs no stream waits and times with the host's clock.

        Returns:
            ``True`` for a device without streams.
        """
        ...

    def communication_backend_name(self) -> str:
        """The ``torch.distributed`` backend for this device.

        Returns:
            A backend name, e.g. ``"nccl"`` or ``"gloo"``.
        """
        ...

    def get_compile_backend(self) -> str:
        """The ``torch.compile`` backend to use on this device.

        Returns:
            The backend's name.
        """
        ...

    def set_compile_backend(self, backend: str) -> None:
        """Choose the ``torch.compile`` backend.

        Args:
            backend: A backend name ``torch.compile`` has registered.

        Raises:
            TypeError: ``backend`` is not a ``str``.
            ValueError: ``backend`` is not a registered backend.
        """
        ...

    def visible_devices_envs(self) -> list[str]:
        """The environment variables that restrict which devices a process sees.

        Returns:
            Their names, e.g. ``["CUDA_VISIBLE_DEVICES"]``.
        """
        ...

    def set_visible_devices_envs(
        self, current_env: MutableMapping[str, str], local_accelerator_ids: Sequence[int]
    ) -> None:
        """Write those variables into ``current_env`` so a child sees only the given devices.

        Args:
            current_env: The child's environment, e.g. a copy of ``os.environ``.
            local_accelerator_ids: The devices the child may use.

        Raises:
            TypeError: ``current_env`` is not a mutable mapping, ``local_accelerator_ids`` is
                not a sequence, or an id is not an ``int``.
            ValueError: An id is negative or repeated.
            RuntimeError: The backend knows no variable that restricts its devices.
        """
        ...

    def export_envs(self) -> list[str]:
        """The environment variables a launcher must forward to remote ranks.

        Returns:
            Name prefixes, ``"ACCEL"`` first.
        """
        ...

    def lazy_call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the device runtime is initialised (at once if it already is).

        Args:
            callback: A function of no arguments.

        Raises:
            TypeError: ``callback`` is not callable.
        """
        ...
