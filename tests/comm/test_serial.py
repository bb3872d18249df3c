"""The group's worker (accel.comm._serial): queued calls run in order, and a call made from
the worker runs what was queued before it there, at once."""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future

import pytest

from accel.comm._serial import SerialWorker


def test_calls_run_in_order_and_their_futures_say_how_they_ended() -> None:
    worker = SerialWorker("test-serial")
    ran: list[int] = []
    gate = threading.Event()
    blocked = worker.submit(gate.wait)  # the rest queue behind it
    futures = [worker.submit(lambda i=i: ran.append(i)) for i in range(5)]

    def fail() -> None:
        raise ValueError("the call's own error")

    failed = worker.submit(fail)
    assert not worker.running_here()
    gate.set()
    assert blocked.result(5) is None  # a call's value is not kept: its end is
    assert [f.result(5) for f in futures] == [None] * 5
    assert ran == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="the call's own error"):
        failed.result(5)
    worker.shutdown()
    with pytest.raises(RuntimeError, match="test-serial: cannot queue a call after shutdown"):
        worker.submit(lambda: None)


def test_a_call_made_on_the_worker_runs_the_queue_before_itself() -> None:
    # What a reduction's then-callback does when it issues a collective and waits for it.
    worker = SerialWorker("test-serial")
    order: list[str] = []
    gate = threading.Event()
    nested: list[Future[None]] = []

    def first() -> None:
        gate.wait()
        order.append("first")
        assert worker.running_here()
        nested.append(worker.submit(lambda: order.append("nested")))
        worker.run_queued()  # without it, waiting here would wait for ever
        nested[0].result(5)
        order.append("first ends")

    done = worker.submit(first)
    behind = worker.submit(lambda: order.append("behind"))  # queued before "nested"
    gate.set()
    done.result(5)
    behind.result(5)
    assert order == ["first", "behind", "nested", "first ends"]
    with pytest.raises(AssertionError, match="for the worker thread"):
        worker.run_queued()
    worker.shutdown()


def test_shutdown_runs_what_is_queued_first() -> None:
    worker = SerialWorker("test-serial")
    ran: list[int] = []
    gate = threading.Event()
    worker.submit(gate.wait)
    worker.submit(lambda: ran.append(1))
    threading.Timer(0.05, gate.set).start()
    worker.shutdown()
    assert ran == [1]
    worker.shutdown()  # idempotent


def test_a_finished_call_is_not_kept_alive_by_the_worker() -> None:
    # A reduction's closure holds its tensors; a pooled block goes back to the pool only
    # when they go, which must not wait for the group's next call.
    worker = SerialWorker("test-serial")

    class Payload:
        pass

    payload = Payload()
    gone = threading.Event()
    weakref.finalize(payload, gone.set)
    worker.submit(lambda held=payload: None).result(5)
    del payload
    assert gone.wait(5)
    worker.shutdown()
