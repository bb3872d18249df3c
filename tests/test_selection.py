"""get_accelerator()/set_accelerator(): choice order, thread safety, validation."""

from __future__ import annotations

import threading

import pytest

import accel
from accel.backends.cpu import CPUAccelerator
from accel.protocols import Accelerator

pytestmark = pytest.mark.usefixtures("fresh_selection")


def test_selection_is_made_once_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    first = accel.get_accelerator()
    assert accel.get_accelerator() is first
    assert isinstance(first, Accelerator)
    assert accel.current_selection().how == "auto"


def test_concurrent_first_calls_create_one_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    barrier = threading.Barrier(8)
    results: list[Accelerator] = []

    def call() -> None:
        barrier.wait()
        results.append(accel.get_accelerator())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert len({id(result) for result in results}) == 1


def test_env_picks_a_backend_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")
    assert isinstance(accel.get_accelerator(), CPUAccelerator)
    assert accel.current_selection().how == "env"


@pytest.mark.parametrize("value", ["tpu", "", "CPU"])
def test_unknown_env_backend_lists_the_known_names(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ACCEL_BACKEND", value)
    with pytest.raises(ValueError, match=f"ACCEL_BACKEND={value!r}.*expected one of: .*cpu"):
        accel.get_accelerator()


def test_explicit_accelerator_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_BACKEND", "no-such-backend")
    mine = CPUAccelerator()
    accel.set_accelerator(mine)
    assert accel.get_accelerator() is mine
    assert accel.current_selection().how == "explicit"


class _HalfBackend:
    def device_name(self, device_index: int | None = None) -> str:
        return "half"

    synchronize = None


def test_set_accelerator_names_the_missing_members() -> None:
    with pytest.raises(TypeError, match="_HalfBackend") as caught:
        accel.set_accelerator(_HalfBackend())  # type: ignore[arg-type]
    missing = str(caught.value).rsplit(": ", 1)[1].split(", ")
    assert "synchronize" in missing  # present but None
    assert "manual_seed" in missing  # absent
    assert "device_name" not in missing  # present members are not reported


def test_set_accelerator_rejects_a_class() -> None:
    with pytest.raises(TypeError, match=r"did you mean CPUAccelerator\(\)"):
        accel.set_accelerator(CPUAccelerator)  # type: ignore[arg-type]


def test_a_thread_kept_waiting_by_the_choice_says_which_thread_is_choosing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A constructor that hands get_accelerator() to another thread and joins it deadlocks
    # (the other thread waits for the choice the constructor is part of); that cannot be
    # told from a slow probe, so the waiting thread says who it waits for instead of hanging
    # silently.
    from accel import _selection

    monkeypatch.setattr(_selection, "SLOW_CHOICE_S", 0.05)
    asked: list[Accelerator] = []

    def constructor_asking_from_a_thread() -> _selection.Selection:
        helper = threading.Thread(target=lambda: asked.append(accel.get_accelerator()))
        helper.start()
        for _ in range(1000):  # a real constructor would join it, and wait for ever
            if caplog.records:
                break
            helper.join(timeout=0.01)
        assert helper.is_alive()
        return _selection.Selection(CPUAccelerator(), "auto", "test")

    monkeypatch.setattr(_selection, "_choose", constructor_asking_from_a_thread)
    with caplog.at_level("WARNING", logger="accel"):
        chosen = accel.get_accelerator()
        for _ in range(1000):  # the helper takes the choice once the lock is free
            if asked:
                break
            threading.Event().wait(0.01)
    assert asked == [chosen]  # once the choice is made, the waiting thread gets it
    [record] = caplog.records
    message = record.getMessage()
    assert "accel.get_accelerator() in thread 'Thread-" in message
    assert f"for thread {threading.current_thread().name!r}, which is choosing" in message
    assert "the process is deadlocked" in message
