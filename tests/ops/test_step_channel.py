"""accel.ops.step_channel: the shared-memory channel a driver and an optimizer worker
talk through. One process plays both sides here; tests/integrations/deepspeed/
test_zenflow.py runs the worker in its own process."""

from __future__ import annotations

import ctypes
import mmap
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.ops import step_channel
from accel.ops.step_channel import GroupHyper, StepCommand

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]  # fmt: skip
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _group(lr: float = 1e-3, bias_correction: bool = True) -> GroupHyper:
    return GroupHyper(lr, 0.9, 0.999, 1e-8, 0.01, bias_correction)


@pytest.fixture
def channel() -> Iterator[int]:
    block = torch.zeros(step_channel.channel_bytes(), dtype=torch.uint8)
    step_channel.init(block.data_ptr(), 2)
    yield block.data_ptr()
    del block


def test_a_step_goes_to_the_worker_and_its_completion_back(channel: int) -> None:
    groups = (_group(1e-3, True), _group(2.5e-4, False))
    assert step_channel.wait(channel, 0.0) is False  # nothing submitted
    assert step_channel.next_command(channel, 0.0) is None
    step_channel.submit(channel, 1, 7, groups)
    assert step_channel.next_command(channel, 0.0) == StepCommand(1, 7, groups)
    assert step_channel.wait(channel, 0.0) is False  # taken, not done
    step_channel.complete(channel)
    assert step_channel.wait(channel, 0.0) is True
    assert step_channel.wait(channel, 0.0) is False  # one completion, consumed once


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(
        st.tuples(
            st.floats(0, 10, allow_subnormal=True),
            st.floats(0, 0.999999),
            st.floats(0, 0.999999),
            st.floats(1e-30, 1.0),
            st.floats(0, 1),
            st.booleans(),
        ),
        min_size=1,
        max_size=5,
    ),
    step=st.integers(1, 2**62),
)
def test_hyper_parameters_arrive_exactly(
    values: list[tuple[float, float, float, float, float, bool]], step: int
) -> None:
    # float64 end to end: the worker's step must use the numbers the driver passed, as a
    # direct adam_update would (a float32 hop would change beta1 = 0.9, and the results).
    block = torch.zeros(step_channel.channel_bytes(), dtype=torch.uint8)
    step_channel.init(block.data_ptr(), len(values))
    groups = tuple(GroupHyper(*row) for row in values)
    step_channel.submit(block.data_ptr(), 0, step, groups)
    assert step_channel.next_command(block.data_ptr(), 0.0) == StepCommand(0, step, groups)


def test_the_driver_may_run_ahead_by_the_slots_and_no_further(channel: int) -> None:
    for step in range(1, step_channel.SLOTS + 1):
        step_channel.submit(channel, step % 2, step, [_group(), _group()])
    with pytest.raises(RuntimeError, match="commands already wait for the worker"):
        step_channel.submit(channel, 0, 99, [_group(), _group()])
    taken = [step_channel.next_command(channel, 0.0) for _ in range(step_channel.SLOTS)]
    assert [c.step for c in taken if isinstance(c, StepCommand)] == [1, 2, 3, 4]  # in order
    step_channel.submit(channel, 0, 5, [_group(), _group()])  # slots free again


def test_a_worker_failure_is_raised_by_the_driver(channel: int) -> None:
    step_channel.submit(channel, 0, 1, [_group(), _group()])
    assert isinstance(step_channel.next_command(channel, 0.0), StepCommand)
    step_channel.complete(channel, "ValueError: params and grads overlap in memory")
    with pytest.raises(RuntimeError, match="worker failed: ValueError: params and grads overlap"):
        step_channel.wait(channel, 1.0)
    with pytest.raises(RuntimeError, match="worker failed"):  # and on every later submit
        step_channel.submit(channel, 1, 2, [_group(), _group()])


def test_a_long_message_is_cut_not_overflowed(channel: int) -> None:
    step_channel.complete(channel, "x" * 100_000)
    with pytest.raises(RuntimeError) as raised:
        step_channel.wait(channel, 1.0)
    assert 1000 < len(str(raised.value)) < 1100


def test_exit_comes_after_the_steps_before_it_and_closes_the_channel(channel: int) -> None:
    step_channel.submit(channel, 0, 1, [_group(), _group()])
    step_channel.close(channel)
    with pytest.raises(RuntimeError, match="cannot submit a step after the exit command"):
        step_channel.submit(channel, 1, 2, [_group(), _group()])
    assert isinstance(step_channel.next_command(channel, 0.0), StepCommand)
    assert step_channel.next_command(channel, 0.0) == "exit"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: step_channel.submit(a, 2, 1, [_group(), _group()]), "state_index must be"),
        (lambda a: step_channel.submit(a, 0, 0, [_group(), _group()]), "step must be"),
        (lambda a: step_channel.submit(a, 0, True, [_group(), _group()]), "step must be"),
        (lambda a: step_channel.submit(a, 0, 1, [_group()]), "the channel has 2 groups, got 1"),
        (lambda a: step_channel.submit(a, 0, 1, [_group(), _group(float("nan"))]), "group 1: lr"),
        (
            lambda a: step_channel.submit(a, 0, 1, [GroupHyper(1e-3, 1.0, 0.9, 1e-8, 0, True)] * 2),
            "group 0: betas\\[0\\] must be in \\[0, 1\\)",
        ),
        (
            lambda a: step_channel.submit(a, 0, 1, [GroupHyper(1e-3, 0.9, 0.9, 0.0, 0, True)] * 2),
            "group 0: eps must be",
        ),
        (
            lambda a: step_channel.submit(a, 0, 1, [_group(), _group(bias_correction="no")]),  # type: ignore[arg-type]
            "group 1: bias_correction must be True or False",
        ),
        (lambda a: step_channel.wait(a, -1.0), "timeout must be"),
        (lambda a: step_channel.wait(a, float("nan")), "timeout must be"),
        (lambda a: step_channel.next_command(a, float("inf")), "timeout must be"),
        (lambda a: step_channel.wait(a + 1, 0.0), "must be aligned"),
        (lambda a: step_channel.wait(0, 0.0), "address must be a positive int"),
        (lambda a: step_channel.wait(-a, 0.0), "address must be a positive int"),
        (lambda a: step_channel.init(a, 0), "groups must be an int in \\[1, 1024\\]"),
        (lambda a: step_channel.init(a, 1025), "groups must be an int in \\[1, 1024\\]"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(
    channel: int, call: object, message: str
) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=message):
        call(channel)


def test_memory_no_channel_was_made_in_is_refused() -> None:
    plain = torch.zeros(step_channel.channel_bytes(), dtype=torch.uint8)
    with pytest.raises(ValueError, match="no channel at address"):
        step_channel.wait(plain.data_ptr(), 0.0)
    small = torch.zeros(64, dtype=torch.uint8)  # the block would run past it
    with pytest.raises(ValueError, match=r"(not readable memory|no channel)"):
        step_channel.submit(small.data_ptr(), 0, 1, [_group()])


def _map(size: int, prot: int, flags: int = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) -> int:
    address = _LIBC.mmap(None, size, prot, flags, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    return int(address)


def test_unmapped_and_read_only_memory_are_errors_not_crashes() -> None:
    size = step_channel.channel_bytes()
    gone = _map(size, mmap.PROT_READ | mmap.PROT_WRITE)
    _LIBC.munmap(gone, size)
    with pytest.raises(ValueError, match="not readable memory of this process"):
        step_channel.wait(gone, 0.0)
    with pytest.raises(ValueError, match="not readable memory of this process"):
        step_channel.init(gone, 1)
    read_only = _map(size, mmap.PROT_READ)
    try:
        with pytest.raises(ValueError, match="not writable memory of this process"):
            step_channel.init(read_only, 1)
    finally:
        _LIBC.munmap(read_only, size)


_CALLS = {
    "submit": lambda a: step_channel.submit(a, 1, 2, [_group()]),
    "wait": lambda a: step_channel.wait(a, 0.0),
    "close": step_channel.close,
    "complete": step_channel.complete,
    "next_command": lambda a: step_channel.next_command(a, 0.0),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
@pytest.mark.parametrize("protection", ["whole", "last page"])
def test_a_channel_this_process_may_only_read_is_refused_not_a_crash(
    call: str, protection: str
) -> None:
    # A real channel in shared memory, then made read-only here (as a process that maps
    # it read-only sees it): every call writes the block, and each died with SIGSEGV.
    size = step_channel.channel_bytes()
    address = _map(size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    try:
        step_channel.init(address, 1)
        step_channel.submit(address, 0, 1, [_group()])
        pages = (address, size) if protection == "whole" else ((address + size - 1) & ~4095, 1)
        assert _LIBC.mprotect(*pages, mmap.PROT_READ) == 0, ctypes.get_errno()
        with pytest.raises(
            ValueError, match=rf"address {hex(address)} \({size} bytes\) is not writable memory"
        ):
            _CALLS[call](address)
        # Refused without a byte written: writable again, the channel is as it was.
        assert _LIBC.mprotect(address, size, mmap.PROT_READ | mmap.PROT_WRITE) == 0
        assert step_channel.next_command(address, 0.0) == StepCommand(0, 1, (_group(),))
    finally:
        _LIBC.munmap(address, size)


def test_waiting_releases_the_gil(channel: int) -> None:
    counted = 0
    waiter = threading.Thread(target=step_channel.wait, args=(channel, 1.0))
    waiter.start()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        counted += 1  # Python runs here only while the waiter is off the GIL
    waiter.join()
    assert counted > 10_000


class _Interrupted(Exception):
    pass


def test_a_signal_interrupts_a_long_wait() -> None:
    block = torch.zeros(step_channel.channel_bytes(), dtype=torch.uint8)
    step_channel.init(block.data_ptr(), 1)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        started = time.monotonic()
        with pytest.raises(_Interrupted):
            step_channel.wait(block.data_ptr(), 60.0)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(_Interrupted):
            step_channel.next_command(block.data_ptr(), 60.0)
        assert time.monotonic() - started < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_timed_wait_returns_near_its_timeout(channel: int) -> None:
    started = time.monotonic()
    assert step_channel.wait(channel, 0.3) is False
    assert 0.25 < time.monotonic() - started < 5


def test_the_python_limits_are_the_native_ones() -> None:
    from accel.ops import _cpu_optim

    assert (step_channel.MAX_GROUPS, step_channel.SLOTS) == (
        _cpu_optim.CHANNEL_MAX_GROUPS,
        _cpu_optim.CHANNEL_SLOTS,
    )


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([-1.0, 0.9, 0.999, 1e-8, 0.0], r"group 1: lr must be a finite number >= 0 .*got -1$"),
        ([float("nan"), 0.9, 0.999, 1e-8, 0.0], r"group 1: lr must be .*got nan$"),
        ([1e-3, 5.0, 0.999, 1e-8, 0.0], r"group 1: beta1 must be in \[0, 1\), got 5$"),
        ([1e-3, 0.9, -2.0, 1e-8, 0.0], r"group 1: beta2 must be in \[0, 1\), got -2$"),
        (
            [1e-3, 0.9, 0.999, 0.0, 0.0],
            r"group 1: eps must be a finite number > 0 that float32 holds \(1.401e-45 to 3.403e\+38\), got 0$",
        ),
        ([1e-3, 0.9, 0.999, 1e-8, 1e39], r"group 1: weight_decay must be .*got 1e\+39$"),
    ],
)
def test_the_native_submit_checks_each_groups_hyper_parameters(
    channel: int, row: list[float], message: str
) -> None:
    # Only finiteness was checked: a negative lr or a beta of 5 went to the worker.
    from accel.ops import _cpu_optim

    good = [1e-3, 0.9, 0.999, 1e-8, 0.0]
    with pytest.raises(ValueError, match=message):
        _cpu_optim.channel_submit(channel, 0, 1, [good, row], [True, True])
    assert step_channel.next_command(channel, 0.0) is None  # nothing was queued
