"""OpBuilderAPI: native kernels that ship with a backend, loaded without compiling."""

from __future__ import annotations

from types import ModuleType

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


class OpBuilder(Protocol):
    """One native op: whether it can run here, and the module that implements it."""

    def name(self) -> str:
        """The op's name.

        Returns:
            E.g. ``"cpu_adam"``.
        """
        ...

    def is_compatible(self, verbose: bool = False) -> bool:
        """Whether :meth:`load` can succeed on this machine.

        Args:
            verbose: Log the reason when it cannot.

        Returns:
            ``True`` when the op can load.
        """
        ...

    def incompatibility_reason(self) -> str | None:
        """Why the op cannot run here.

        Returns:
            The reason, or ``None`` when it can run.
        """
        ...

    def load(self, verbose: bool = False) -> ModuleType:
        """Load the native module.

        Args:
            verbose: Log what is loaded.

        Returns:
            The module implementing the op.

        Raises:
            RuntimeError: The op cannot run here; the message gives the reason.
        """
        ...


@fast_protocol
@runtime_checkable
class OpBuilderAPI(Protocol):
    """Look up native op builders by their DeepSpeed class names (e.g. ``"CPUAdamBuilder"``)."""

    def create_op_builder(self, class_name: str) -> OpBuilder | None:
        """A new instance of :meth:`get_op_builder`'s class, or ``None`` where it has none.

        Args:
            class_name: As for :meth:`get_op_builder`, which also says what it raises.
        """
        ...

    def get_op_builder(self, class_name: str) -> type[OpBuilder] | None:
        """The builder class of the op named ``class_name``.

        Args:
            class_name: DeepSpeed's builder class name, e.g. ``"CPUAdamBuilder"``.

        Returns:
            The builder class, or ``None`` when this backend has no op of that name.

        Raises:
            TypeError: ``class_name`` is not a ``str``.
        """
        ...

    def op_builder_names(self) -> list[str]:
        """Every builder class name this backend knows.

        Returns:
            The names, sorted.
        """
        ...
