"""OpBuilderAPI: native kernels that ship with a backend, loaded without compiling."""

from __future__ import annotations

from types import ModuleType

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


class OpBuilder(Protocol):
    """One native op: whether it can run here, and the module that implements it."""

    def name(self) -> str:
        """The op's name, e.g. ``"cpu_adam"``."""
        ...

    def is_compatible(self, verbose: bool = False) -> bool:
        """Whether :meth:`load` can succeed on this machine."""
        ...

    def incompatibility_reason(self) -> str | None:
        """Why the op cannot run here, or ``None`` when it can."""
        ...

    def load(self, verbose: bool = False) -> ModuleType:
        """The native module; raises ``RuntimeError`` with the reason when incompatible."""
        ...


@fast_protocol
@runtime_checkable
class OpBuilderAPI(Protocol):
    """Look up native op builders by their DeepSpeed class names (e.g. ``"CPUAdamBuilder"``)."""

    def create_op_builder(self, class_name: str) -> OpBuilder | None:
        """A builder instance, or ``None`` when this backend has no op of that name."""
        ...

    def get_op_builder(self, class_name: str) -> type[OpBuilder] | None:
        """The builder class, or ``None`` when this backend has no op of that name."""
        ...

    def op_builder_names(self) -> list[str]:
        """Every builder class name this backend knows."""
        ...
