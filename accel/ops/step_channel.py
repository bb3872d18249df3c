"""A shared-memory channel through which one process asks another to run optimizer steps.

The *driver* (a training process) submits steps and waits for them; the *worker* (a
process holding the optimizer state) takes them in order and reports each one done or
failed. The channel lives in memory both processes map, usually a shared CPU tensor of
:func:`channel_bytes` bytes, and is named by its address. Up to :data:`SLOTS` commands
may wait for the worker, so the driver can submit the next step while the worker still
runs the previous one. A failure in the worker is raised by the driver's next
:func:`wait` (and :func:`submit`) as ``RuntimeError`` with the worker's message.

DeepSpeed's ZenFlow drives its Adam process through one
(:mod:`accel.integrations.deepspeed.zenflow`). Every argument is checked here, and again in
C++: the address (aligned, memory this process may read and write, prepared by
:func:`init`), so an address that is not a channel, or one mapped read-only here, is a
``ValueError``, not a crash; and each group's hyper-parameters. The first call loads the
kernels: a bad ``ACCEL_CPU_ISA`` is then a ``ValueError`` naming it. What an address cannot
tell is the size of the buffer behind it: :func:`init` writes :func:`channel_bytes` bytes
there, and a smaller buffer (DeepSpeed's ZenFlow sizes its own with :func:`channel_bytes`)
has what follows it overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Final, Literal

from accel.ops import _hyperparameters as hyperparameters
from accel.ops import isa


def _native() -> ModuleType:
    """The compiled channel (in ``_cpu_optim``), imported on first use: importing this
    module, and the DeepSpeed integration that does, works where it was not built."""
    return isa.load_native("accel.ops._cpu_optim")


MAX_GROUPS: Final = 1024
"""The most parameter groups one channel carries (C++ checks it again)."""
SLOTS: Final = 4
"""Commands that may wait for the worker at once (``CHANNEL_SLOTS`` in C++)."""


@dataclass(frozen=True)
class GroupHyper:
    """One parameter group's hyper-parameters for one Adam step."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    bias_correction: bool


@dataclass(frozen=True)
class StepCommand:
    """A step for the worker: which of two state buffers to use, its number, its groups."""

    state_index: int
    step: int
    groups: tuple[GroupHyper, ...]


def _address(address: object) -> int:
    if not isinstance(address, int) or isinstance(address, bool) or address <= 0:
        raise ValueError(f"address must be a positive int (a data_ptr()), got {address!r}")
    return address


def _int_in(value: object, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


def _timeout(timeout: object) -> float:
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or not 0 <= timeout <= 1e9  # also False for NaN
    ):
        raise ValueError(f"timeout must be a number of seconds in [0, 1e9], got {timeout!r}")
    return float(timeout)


def channel_bytes() -> int:
    """Bytes a channel occupies: the size of the shared buffer to give :func:`init`."""
    size: int = _native().channel_size()
    return size


def init(address: int, groups: int) -> None:
    """Prepare a channel for ``groups`` parameter groups at ``address`` (in the driver,
    before the worker starts).

    Args:
        address: Where the channel goes: the ``data_ptr()`` of a buffer of
            :func:`channel_bytes` bytes that both processes map.
        groups: The number of parameter groups each step carries, 1 to :data:`MAX_GROUPS`.

    Raises:
        ValueError: ``address`` is not a positive ``int``, or not aligned, readable and
            writable memory of this process; or ``groups`` is out of range.
        RuntimeError: The channel's semaphores cannot be created.
        ImportError: This install has no compiled CPU kernels.
    """
    _native().channel_init(_address(address), _int_in(groups, "groups", 1, MAX_GROUPS))


def _checked_group(index: int, group: GroupHyper) -> list[float]:
    try:
        beta1, beta2 = hyperparameters.check_betas((group.beta1, group.beta2))
        return [
            hyperparameters.check_non_negative(group.lr, "lr"),
            beta1,
            beta2,
            hyperparameters.check_eps(group.eps),
            hyperparameters.check_non_negative(group.weight_decay, "weight_decay"),
        ]
    except ValueError as error:
        raise ValueError(f"group {index}: {error}") from None


def submit(address: int, state_index: int, step: int, groups: Sequence[GroupHyper]) -> None:
    """Queue step ``step`` (>= 1) over state buffers ``state_index`` (0 or 1) with one
    :class:`GroupHyper` per group. Returns at once; :func:`wait` collects it.

    Args:
        address: The channel's address (the ``data_ptr()`` of its shared buffer).
        state_index: Which of the two state buffers the step uses, 0 or 1.
        step: The number of the step, ``>= 1``.
        groups: One :class:`GroupHyper` per group the channel was prepared for.

    Raises:
        ValueError: ``state_index``, ``step`` or a group's hyper-parameter is out of range
            (the message names the group); ``groups`` does not match the channel's number
            of groups; or ``address`` is not a positive ``int``, is not memory this
            process may write, or holds no channel.
        RuntimeError: The worker failed (the message is the worker's); the exit command
            was queued before; or :data:`SLOTS` commands already wait for the worker.
        ImportError: This install has no compiled CPU kernels.
    """
    state_index = _int_in(state_index, "state_index", 0, 1)
    step = _int_in(step, "step", 1, 2**63 - 1)
    hyper = [_checked_group(i, group) for i, group in enumerate(groups)]
    flags = [
        hyperparameters.check_flag(group.bias_correction, f"group {i}: bias_correction")
        for i, group in enumerate(groups)
    ]
    _native().channel_submit(_address(address), state_index, step, hyper, flags)


def wait(address: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the worker to finish one command: True when it
    did, False on timeout; ``RuntimeError`` with the worker's message when it failed.

    Args:
        address: The channel's address (the ``data_ptr()`` of its shared buffer).
        timeout: Seconds to wait, 0 to 1e9.

    Returns:
        ``True`` when the worker finished a command, ``False`` on timeout.

    Raises:
        ValueError: ``address`` is not a positive ``int``, is not memory this process may
            write, or holds no channel :func:`init` prepared; or ``timeout`` is not a
            number of seconds in [0, 1e9].
        RuntimeError: The worker reported a failure (the message is the worker's).
        ImportError: This install has no compiled CPU kernels.
    """
    done: bool = _native().channel_wait(_address(address), _timeout(timeout))
    return done


def close(address: int) -> None:
    """Queue the exit command: the worker finishes the steps before it, then returns.

    Args:
        address: The channel's address (the ``data_ptr()`` of its shared buffer).

    Raises:
        ValueError: ``address`` is not a positive ``int``, is not memory this process may
            write, or holds no channel :func:`init` prepared.
        RuntimeError: The worker failed (the message is the worker's); the exit command
            was queued before; or :data:`SLOTS` commands already wait for the worker.
        ImportError: This install has no compiled CPU kernels.
    """
    _native().channel_exit(_address(address))


def next_command(address: int, timeout: float) -> StepCommand | Literal["exit"] | None:
    """The worker's side: the next command, ``"exit"``, or None when none came within
    ``timeout`` seconds. Report each :class:`StepCommand` with :func:`complete`.

    Args:
        address: The channel's address (the ``data_ptr()`` of its shared buffer).
        timeout: Seconds to wait, 0 to 1e9.

    Returns:
        The next :class:`StepCommand`; ``"exit"`` for the exit command; ``None`` when no
        command came within ``timeout``.

    Raises:
        ValueError: ``address`` is not a positive ``int``, is not memory this process may
            write, or holds no channel :func:`init` prepared; or ``timeout`` is not a
            number of seconds in [0, 1e9].
        RuntimeError: A command was announced but is not in the channel (its memory was
            changed under it).
        ImportError: This install has no compiled CPU kernels.
    """
    command: tuple[str] | tuple[str, int, int, list[tuple[float, float, float, float, float, bool]]]
    command = _native().channel_next(_address(address), _timeout(timeout))
    if len(command) == 1:
        return None if command[0] == "idle" else "exit"
    _, state_index, step, groups = command
    return StepCommand(state_index, step, tuple(GroupHyper(*group) for group in groups))


def complete(address: int, error: str | None = None) -> None:
    """The worker's side: the command it took is done (``error`` None) or failed.

    Args:
        address: The channel's address (the ``data_ptr()`` of its shared buffer).
        error: ``None`` when the command succeeded; else the failure's message, which the
            driver's next :func:`wait` or :func:`submit` raises (cut to 1023 bytes).

    Raises:
        ValueError: ``address`` is not a positive ``int``, is not memory this process may
            write, or holds no channel :func:`init` prepared.
        ImportError: This install has no compiled CPU kernels.
    """
    _native().channel_complete(_address(address), error)
