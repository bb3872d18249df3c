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
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import cast

from accel.backends.base import Availability, BackendClass

PROBE_TIMEOUT_ENV = "ACCEL_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT = 10.0
PROBE_ISOLATION_ENV = "ACCEL_PROBE_ISOLATION"
ISOLATIONS = ("thread", "process")

# The child prints one line after this marker: the answer, as JSON.
_MARKER = "accel-probe "
# The child imports what every probe needs, says it is ready (its start-up does not count
# against a probe's limit), then asks each target in turn and prints one line per answer.
_CHILD = f"""
import importlib, json, sys
from accel.backends.base import Availability
print({_MARKER!r} + "ready", flush=True)
for target in sys.argv[1:]:
    try:
        module, _, qualified = target.partition(":")
        found = importlib.import_module(module)
        for part in qualified.split("."):
            found = getattr(found, part)
        answer = found.probe()
        if isinstance(answer, Availability):
            said = {{"available": answer.available, "reason": answer.reason}}
        else:
            said = {{"other": f"{{type(answer).__name__}} {{answer!r}}"}}
    except BaseException as error:
        said = {{"raised": f"{{type(error).__name__}}: {{error}}"}}
    print({_MARKER!r} + json.dumps(said), flush=True)
"""
# How long the child may take to start (import accel and torch) before its first probe.
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


class Unanswered:
    """Why a probe gave no :class:`Availability`: the text for ``accel report``, and the
    exception it raised, if it raised one in this process."""

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        self.reason, self.error = reason, error


def in_thread(backend: BackendClass, name: str, timeout: float) -> Availability | Unanswered:
    """``backend.probe()`` on a daemon thread, waited for at most ``timeout`` seconds."""
    outcome: list[object] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(backend.probe())
        except BaseException as error:  # SystemExit, KeyboardInterrupt: said as they are
            failure.append(error)

    # A daemon thread bounds the wait: a probe stuck in a driver call cannot be
    # interrupted, but it no longer holds up selection or `accel report`.
    worker = threading.Thread(target=run, name=f"accel-probe-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if failure:
        error = failure[0]
        return Unanswered(f"probe() raised {type(error).__name__}: {error}", error)
    if not outcome:
        return Unanswered(f"probe() did not answer within {timeout:g} s ({PROBE_TIMEOUT_ENV})")
    return _checked(outcome[0], f"{type(outcome[0]).__name__} {outcome[0]!r}")


def in_process(targets: list[str], timeout: float) -> dict[str, Availability | Unanswered]:
    """The probes of the classes at ``targets`` (``module:Class``), asked one after another
    in a separate interpreter that sees this process's ``sys.path``, each within
    ``timeout`` seconds: a probe that overruns or crashes ends its process, and a fresh
    one asks the targets after it."""
    answers: dict[str, Availability | Unanswered] = {}
    pending = list(targets)
    while pending:
        said, failure = _ask(pending, timeout)
        for target, answer in zip(pending, said, strict=False):
            answers[target] = answer
        pending = pending[len(said) :]
        if pending and failure is not None:  # the probe that ended the process
            answers[pending.pop(0)] = failure
    return answers


def _ask(
    targets: list[str], timeout: float
) -> tuple[list[Availability | Unanswered], Unanswered | None]:
    """Answers from one child process, in order, and why it stopped early (if it did)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    # stderr to a file: a child that writes much there never blocks on a full pipe.
    with tempfile.TemporaryFile() as errors, subprocess.Popen(
        [sys.executable, "-c", _CHILD, *targets], env=env, stdout=subprocess.PIPE,
        stderr=errors,
    ) as child:  # fmt: skip
        assert child.stdout is not None  # piped
        lines = _LineReader(child.stdout.fileno())
        answers: list[Availability | Unanswered] = []
        deadline = time.monotonic() + _START_S
        while len(answers) < len(targets):
            line = lines.next_line(deadline)
            if line is None:  # the limit passed with no answer
                child.kill()
                child.wait()
                return answers, Unanswered(
                    f"probe() did not answer within {timeout:g} s ({PROBE_TIMEOUT_ENV}; in a "
                    f"separate process, {PROBE_ISOLATION_ENV}=process)"
                )
            if not line:  # the process ended
                child.wait()
                errors.seek(0)
                text = errors.read().decode(errors="replace")
                return answers, Unanswered(_failure(child.returncode, text))
            if not line.startswith(_MARKER):
                continue  # whatever a plugin printed
            deadline = time.monotonic() + timeout  # the next probe's limit starts now
            said = line.removeprefix(_MARKER).strip()
            if said != "ready":
                answers.append(_answer(cast("dict[str, object]", json.loads(said))))
        child.wait()
        return answers, None


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


def _failure(returncode: int, stderr: str) -> str:
    """Why a probe process ended before answering: its signal or its last error line."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"probe() killed its process with {name} ({PROBE_ISOLATION_ENV}=process)"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no output"
    return (
        f"probe() ended its process with exit status {returncode}: {last} "
        f"({PROBE_ISOLATION_ENV}=process)"
    )


def _checked(answer: object, shown: str) -> Availability | Unanswered:
    if isinstance(answer, Availability):
        return answer
    return Unanswered(f"probe() returned {shown}, expected accel.backends.base.Availability")
