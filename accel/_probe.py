"""Asking a backend's ``probe()`` with a time limit, in a thread or in a separate process.

A thread (the default) is cheap and sees the process as it is, but it bounds only probes
that let go of the GIL while they wait (a driver call through ctypes, ``time.sleep``, I/O):
a probe that blocks while holding the GIL (a C extension that never releases it) stops
every thread of the interpreter, the one that enforces the limit included. With
``ACCEL_PROBE_ISOLATION=process`` the probes run in one separate interpreter that imports
each backend's class by its registered target and asks them one after another, each within
the limit; one that overruns is killed with that interpreter, and a fresh one asks the
rest. Any probe is then bounded (even one that crashes: that backend is unavailable, with
the signal as the reason), at the cost of an interpreter start (1.5-2 s more for
``get_accelerator()`` with torch, measured on a 2-core machine) and of answers that cannot
see state the parent process has set up.
"""

from __future__ import annotations

import json
import math
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, TextIO, cast

from accel._fork_safe import ForkSafeLock
from accel.backends.base import Availability, BackendClass

PROBE_TIMEOUT_ENV = "ACCEL_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT = 10.0
PROBE_ISOLATION_ENV = "ACCEL_PROBE_ISOLATION"
ISOLATIONS = ("thread", "process")

# The child answers on a pipe of its own (its descriptor is the first argument), one JSON
# object per line naming the target it answers for: a probe writes to stdout and stderr,
# never there, so nothing a probe prints can be taken for an answer or hide one. The child
# imports what every probe needs (torch included: every built-in backend's probe asks it,
# and its import takes seconds on a loaded machine), says it is ready (its start-up does
# not count against a probe's limit), then asks each target in turn.
_CHILD = """
import importlib, json, os, sys
answers = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8")
os.set_inheritable(answers.fileno(), False)  # a process a probe starts must not hold it open
import torch
from accel._probe import _running, raised
from accel.backends.base import Availability

def say(said):
    answers.write(json.dumps(said) + "\\n")
    answers.flush()

say({"ready": True})
for target in sys.argv[2:]:
    try:
        module, _, qualified = target.partition(":")
        _running.name = target  # its import too runs as part of the probe
        found = importlib.import_module(module)
        for part in qualified.split("."):
            found = getattr(found, part)
        answer = found.probe()
        if isinstance(answer, Availability):
            said = {"available": answer.available, "reason": answer.reason}
        else:
            said = {"other": f"{type(answer).__name__} {answer!r}"}
    except BaseException as error:
        said = {"raised": raised(error)}
    say(dict(said, target=target))
"""
# How long the child may take to start (import torch and accel) before its first probe.
_START_S = 120.0


def probe_timeout() -> float:
    """Seconds a backend's probe may take (``ACCEL_PROBE_TIMEOUT``, default 10)."""
    raw = os.environ.get(PROBE_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_PROBE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"environment variable {PROBE_TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}"
        )
    return value


def probe_isolation() -> str:
    """Where probes run: ``ACCEL_PROBE_ISOLATION`` (``thread``, the default, or
    ``process``); any other value is a ``ValueError`` naming the variable."""
    raw = os.environ.get(PROBE_ISOLATION_ENV, "thread")
    if raw not in ISOLATIONS:
        raise ValueError(
            f"environment variable {PROBE_ISOLATION_ENV} must be one of {ISOLATIONS}, got {raw!r}"
        )
    return raw


def raised(error: BaseException) -> str:
    """``error`` as a reason: its type and message, or a ``SystemExit``'s exit code (its
    message is empty for ``sys.exit()``)."""
    if isinstance(error, SystemExit):
        return f"SystemExit with exit code {error.code!r}"
    return f"{type(error).__name__}: {error}"


class Unanswered:
    """Why a probe gave no :class:`Availability`: the text for ``accel report``, and the
    exception it raised, if it raised one in this process."""

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        self.reason, self.error = reason, error


def in_thread(backend: BackendClass, name: str, timeout: float) -> Availability | Unanswered:
    """``backend.probe()`` on a daemon thread, waited for at most ``timeout`` seconds.

    A probe stuck in a driver call cannot be interrupted, but it no longer holds up
    selection or ``accel report``. The threads are kept for the next probe (selection asks
    each registered backend in turn: a thread started and joined per probe cost ~0.2-0.5
    ms each, more on a loaded machine); one whose probe overran is left to it, and the
    next probe gets a new one.
    """
    with _idle_lock:
        worker = _idle.pop() if _idle else _Worker()
    job = _Job(backend, name)
    worker.jobs.put(job)
    if not job.done.wait(timeout):
        return Unanswered(f"probe() did not answer within {timeout:g} s ({PROBE_TIMEOUT_ENV})")
    with _idle_lock:
        _idle.append(worker)
    if job.failure is not None:
        return Unanswered(f"probe() raised {raised(job.failure)}", job.failure)
    return _checked(job.outcome, f"{type(job.outcome).__name__} {job.outcome!r}")


class _Job:
    """One probe for a worker: what it answered or raised, and when it is done."""

    def __init__(self, backend: BackendClass, name: str) -> None:
        self.backend, self.name = backend, name
        self.outcome: object = None
        self.failure: BaseException | None = None
        self.done = threading.Event()


class _Worker:
    """A daemon thread that runs the probes put in ``jobs``, one after another."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="accel-probe", daemon=True).start()

    def _run(self) -> None:
        thread = threading.current_thread()
        while True:
            job = self.jobs.get()
            thread.name = f"accel-probe-{job.name}"  # what a stuck thread's dump shows
            _running.name = job.name
            try:
                job.outcome = job.backend.probe()
            except BaseException as error:  # SystemExit, KeyboardInterrupt: said as they are
                job.failure = error
            _running.name = None
            thread.name = "accel-probe"
            job.done.set()


class _Running(threading.local):
    name: str | None = None


_running = _Running()


def running_probe() -> str | None:
    """The name of the backend whose probe runs in this thread, if one does."""
    return _running.name


# Workers waiting for a probe; a worker whose probe overran never comes back here.
_idle: list[_Worker] = []
_idle_lock = ForkSafeLock()


def _forget_workers() -> None:
    # A forked child has none of its parent's threads: its probes need threads of its own.
    _idle.clear()


os.register_at_fork(after_in_child=_forget_workers)


def in_process(targets: list[str], timeout: float) -> dict[str, Availability | Unanswered]:
    """The probes of the classes at ``targets`` (``module:Class``), asked one after another
    in a separate interpreter that sees this process's ``sys.path``, each within
    ``timeout`` seconds: a probe that overruns or crashes ends its process, and a fresh
    one asks the targets after it. What the probes write to stdout and stderr is written
    to this process's ``sys.stdout`` and ``sys.stderr`` when their interpreter ends."""
    answers: dict[str, Availability | Unanswered] = {}
    while pending := [target for target in targets if target not in answers]:
        failure, started = _ask(pending, timeout, answers)
        if failure is not None and not started:  # no probe was asked: none can be
            return answers | dict.fromkeys(pending, failure)
        if failure is not None:  # the first probe without an answer ended the process
            answers[next(t for t in pending if t not in answers)] = failure
    return answers


def _ask(
    targets: list[str], timeout: float, answers: dict[str, Availability | Unanswered]
) -> tuple[Unanswered | None, bool]:
    """Put in ``answers`` what one child process says about ``targets``; why it stopped
    before answering them all, if it did, and whether it got as far as saying it was
    ready (had imported torch and accel)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    read_end, write_end = os.pipe()
    # Output to files: a child that writes much never blocks on a full pipe.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            try:
                child = subprocess.Popen(
                    [sys.executable, "-c", _CHILD, str(write_end), *targets], env=env,
                    stdout=out, stderr=err, pass_fds=(write_end,),
                )  # fmt: skip
            finally:
                os.close(write_end)  # the child's copy is the only one: EOF when it ends
            with child:
                reader = _LineReader(read_end)
                failure, started = _read_answers(child, reader, targets, timeout, answers)
        finally:
            os.close(read_end)
            _forward(out, sys.stdout)
            _forward(err, sys.stderr)
        if failure is None and any(target not in answers for target in targets):
            failure = Unanswered(_failure(child.returncode, _text(err), started))
        return failure, started


def _read_answers(
    child: subprocess.Popen[bytes],
    lines: _LineReader,
    targets: list[str],
    timeout: float,
    answers: dict[str, Availability | Unanswered],
) -> tuple[Unanswered | None, bool]:
    """Answers from ``child`` until it has answered every target or ended; an
    :class:`Unanswered` if a probe ran out of time (the child is killed); and whether the
    child said it was ready."""
    deadline, started = time.monotonic() + _START_S, False
    while any(target not in answers for target in targets):
        line = lines.next_line(deadline)
        if line is None:  # the limit passed with no answer
            child.kill()
            child.wait()
            if not started:
                return Unanswered(
                    f"the probing interpreter did not import torch and accel within "
                    f"{_START_S:g} s ({PROBE_ISOLATION_ENV}=process)"
                ), False
            return Unanswered(
                f"probe() did not answer within {timeout:g} s ({PROBE_TIMEOUT_ENV}; in a "
                f"separate process, {PROBE_ISOLATION_ENV}=process)"
            ), True
        if not line:  # the process ended
            break
        if not line.endswith("\n"):
            continue  # cut short by the end of the process
        deadline = time.monotonic() + timeout  # the next probe's limit starts now
        said = cast("dict[str, object]", json.loads(line))
        started = started or said.get("ready") is True
        target = said.get("target")
        if isinstance(target, str) and target in targets:
            answers[target] = _answer(said)
    child.wait()
    return None, started


def _forward(output: IO[bytes], stream: TextIO | None) -> None:
    """What the child wrote to ``output``, written to ``stream`` (where a probe on a
    thread would have written it)."""
    text = _text(output)
    if text and stream is not None:
        stream.write(text)
        stream.flush()


def _text(output: IO[bytes]) -> str:
    output.seek(0)
    return output.read().decode(errors="replace")


class _LineReader:
    """Lines of a pipe, each waited for until a deadline (select on the descriptor, then
    reads of whatever is there: no buffered reader can hide a line from select)."""

    def __init__(self, fd: int) -> None:
        self._fd, self._buffer = fd, b""

    def next_line(self, deadline: float) -> str | None:
        """The next line; ``""`` at the end of the pipe; None if none came by ``deadline``
        (``time.monotonic()``)."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self._fd, 65536)
            if not chunk:
                rest, self._buffer = self._buffer, b""
                return rest.decode(errors="replace")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace") + "\n"


def _answer(said: dict[str, object]) -> Availability | Unanswered:
    """A child's line as an answer."""
    if "raised" in said:
        where = f"in a separate process, {PROBE_ISOLATION_ENV}=process"
        return Unanswered(f"probe() raised {said['raised']} ({where})")
    if "other" in said:
        return _checked(None, str(said["other"]))
    return Availability(bool(said["available"]), str(said["reason"]))


def _failure(returncode: int, stderr: str, started: bool) -> str:
    """Why a probe process ended before answering: its signal or its last error line, put
    on the probe, or on the interpreter's start if it never said it was ready."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no output"
    where = f"{PROBE_ISOLATION_ENV}=process"
    if returncode < 0:
        name = signal.Signals(-returncode).name
        if not started:
            return (
                f"the probing interpreter was killed by {name} while importing torch and "
                f"accel ({where})"
            )
        return f"probe() killed its process with {name} ({where})"
    if not started:
        return (
            f"the probing interpreter ended with exit status {returncode} while importing "
            f"torch and accel: {last} ({where})"
        )
    return f"probe() ended its process with exit status {returncode}: {last} ({where})"


def _checked(answer: object, shown: str) -> Availability | Unanswered:
    if isinstance(answer, Availability):
        return answer
    return Unanswered(f"probe() returned {shown}, expected accel.backends.base.Availability")
