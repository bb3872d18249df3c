"""RuntimeAPI implementations: environment, ``torch.compile`` backend, collectives, lazy init."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import ClassVar

from typing_extensions import override

from accel._device_module import device_module
from accel._torch_typed import compile_backends
from accel._validate import check_index_list, check_str
from accel.protocols._contract import attach_contract, implements
from accel.protocols.runtime import RuntimeAPI
from accel.protocols.stream import StreamAPI


@implements(RuntimeAPI)
class RuntimeEnvMixin:
    """Environment handling parametrised by two class attributes, and synchronicity.

    ``visible_devices_env_names``: variables that restrict the devices a process sees
    (``("CUDA_VISIBLE_DEVICES",)`` on CUDA). ``exported_env_prefixes``: prefixes of the
    variables a multi-node launcher forwards to remote ranks.
    """

    visible_devices_env_names: ClassVar[tuple[str, ...]]
    exported_env_prefixes: ClassVar[tuple[str, ...]]
    _synchronized: ClassVar[bool] = True

    @override
    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # Frameworks ask every step; the answer is a property of the class, so it is
        # decided once per class, on the class's first call: the StreamAPI check costs
        # ~0.1 ms a class, and most classes made (mixin stacks, the backends that are not
        # selected) are never asked. A class that answers itself (or inherits a class's own
        # answer) keeps its answer.
        if cls.is_synchronized_device in _DERIVED:
            cls.is_synchronized_device = _decide_synchronized  # type: ignore[method-assign]

    def visible_devices_envs(self) -> list[str]:
        """``visible_devices_env_names``."""
        return list(self.visible_devices_env_names)

    def set_visible_devices_envs(
        self, current_env: MutableMapping[str, str], local_accelerator_ids: Sequence[int]
    ) -> None:
        """Sets each of ``visible_devices_env_names`` to ``"i,j,..."`` (ids in the order given); a
        ``str`` or ``bytes`` is not a sequence of ids here."""
        if not isinstance(current_env, MutableMapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                "current_env must be a mutable mapping such as os.environ or a dict, "
                f"got {type(current_env).__name__}"
            )
        ids = check_index_list(local_accelerator_ids, "local_accelerator_ids")
        if not self.visible_devices_env_names:
            # Writing nothing would silently leave every device visible to the child.
            raise RuntimeError(
                f"{type(self).__name__} knows no environment variable that restricts its "
                "visible devices"
            )
        value = ",".join(map(str, ids))
        for name in self.visible_devices_env_names:
            current_env[name] = value

    def export_envs(self) -> list[str]:
        """``ACCEL`` first on every backend (``ACCEL_BACKEND`` and the backends' own variables must
        reach every rank), then the backend's ``exported_env_prefixes``."""
        return ["ACCEL", *(p for p in self.exported_env_prefixes if p != "ACCEL")]

    def is_synchronized_device(self) -> bool:
        """True exactly when the backend has no streams: derived from the capability, so the two
        answers cannot drift apart."""
        return self._synchronized


def _decide_synchronized(self: RuntimeEnvMixin) -> bool:
    """Decide whether the backend has no streams (see the answers below), once per class."""
    cls = type(self)
    synchronized = not issubclass(cls, StreamAPI)
    # Answered from now on by a function that returns the constant: a per-step call at the
    # cost of DeepSpeed's `return True`, not an attribute read through self.
    cls.is_synchronized_device = _synchronized if synchronized else _not_synchronized  # type: ignore[method-assign]
    return synchronized


def _synchronized(self: object) -> bool:
    """True: the backend has no streams, so an op has finished when its call returns."""
    return True


def _not_synchronized(self: object) -> bool:
    """False: the backend has streams; work may still be queued when a call returns."""
    return False


# The answers derived from the capability, which a subclass's own answer replaces.
_DERIVED = frozenset(
    {RuntimeEnvMixin.is_synchronized_device, _decide_synchronized, _synchronized, _not_synchronized}
)

# Set as each backend's is_synchronized_device by RuntimeEnvMixin.__init_subclass__ and
# then by its first call.
attach_contract(_decide_synchronized, RuntimeAPI, "is_synchronized_device")
attach_contract(_synchronized, RuntimeAPI, "is_synchronized_device")
attach_contract(_not_synchronized, RuntimeAPI, "is_synchronized_device")


def registered_compile_backends() -> list[str]:
    """Every backend name ``torch.compile`` accepts in this process.

    Imports ``torch._dynamo`` (about a second), so it runs only when a backend is chosen.
    """
    return sorted(compile_backends())


@implements(RuntimeAPI)
class CompileBackendMixin:
    """``get/set_compile_backend``, starting from ``default_compile_backend``."""

    default_compile_backend: ClassVar[str] = "inductor"
    _compile_backend: str | None = None

    def get_compile_backend(self) -> str:
        """``default_compile_backend`` until one is set."""
        return self._compile_backend or self.default_compile_backend

    def set_compile_backend(self, backend: str) -> None:
        name = check_str(backend, "backend")
        known = registered_compile_backends()
        if name not in known:
            raise ValueError(
                f"backend {name!r} is not a registered torch.compile backend; "
                f"expected one of: {', '.join(known)}"
            )
        self._compile_backend = name


# The collectives library each vendor ships for its device. Known types use this table
# first: torch's own default map is global and mutable, and registering a backend for a
# device overwrites it (importing torch._dynamo registers the testing "fake" process group
# for hpu, after which torch reports "fake" as hpu's default).
VENDOR_COMMUNICATION_BACKENDS: dict[str, str] = {
    "cuda": "nccl",
    "xpu": "xccl",
    "hpu": "hccl",
    "npu": "hccl",
    "mlu": "cncl",
    "mps": "gloo",
    "mtia": "gloo",
}


def default_communication_backend(device_type: str) -> str:
    """The vendor's backend for a known type; else torch.distributed's default; else gloo.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        ``VENDOR_COMMUNICATION_BACKENDS[device_type]`` for a type in that table; else what
        ``torch.distributed.get_default_backend_for_device`` gives (torch >= 2.6); else
        ``"gloo"``.
    """
    known = VENDOR_COMMUNICATION_BACKENDS.get(device_type)
    if known is not None:
        return known
    import torch.distributed as dist

    lookup = getattr(dist, "get_default_backend_for_device", None)  # torch >= 2.6
    if callable(lookup):
        try:
            return str(lookup(device_type))
        except (RuntimeError, ValueError):
            pass  # the device registered no default backend
    return "gloo"


@implements(RuntimeAPI)
class TorchRuntimeMixin:
    """``communication_backend_name`` and ``lazy_call`` through the device module."""

    device_type: ClassVar[str]

    def communication_backend_name(self) -> str:
        """The vendor's library where :data:`VENDOR_COMMUNICATION_BACKENDS` has the type, else
        torch's default (:func:`default_communication_backend`)."""
        return default_communication_backend(self.device_type)

    def lazy_call(self, callback: Callable[[], None]) -> None:
        """Through the device module's ``_lazy_call`` where it has one; otherwise ``callback`` runs
        at once."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        module = device_module(self.device_type)
        lazy = getattr(module, "_lazy_call", None)
        if callable(lazy):
            lazy(callback)
        else:
            callback()
