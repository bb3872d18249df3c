"""Start test processes from a warm interpreter: ``popen`` and ``run`` take the arguments
of ``subprocess.Popen`` and ``subprocess.run`` (the subset the tests use) and, for
``[sys.executable, SCRIPT | -m MODULE | -c CODE, ...]``, fork the process from a zygote
that has imported torch (tests/support/zygote.py) instead of starting a cold interpreter.

Why: the suite starts ~350 Python processes; each cold one spends ~1.4 s of CPU importing
torch on the 2-core machine the suite is sized for (``time python -c "import torch"``), and
the suite is CPU-bound. A fork costs milliseconds.

What stays cold: any other command, interpreter options other than ``-u`` (``-X ...``),
``pass_fds`` and the other ``Popen`` arguments this module does not take; and every start
when ``ACCEL_TESTS_COLD_STARTS=1`` (to tell a fault of the warm start from one of the code
under test). A warm child's ``sys.executable`` is a stand-in (tests/support/stand_in.py),
so what it starts in turn, a launcher's ranks above all, is forked warm too where it
would start as the zygote did (the same start-up variables and CPUs, no cores pinned by
``accel run``'s plan) and starts cold otherwise. multiprocessing's spawn start method
keeps the real interpreter (torch imports it before the stand-in exists), so what it
starts is cold. zygote.py lists what a warm child sees otherwise than a cold one (torch
already imported, one string hash seed per zygote, the zygote as parent, standard input
on /dev/null); a test that depends on any of it (start-up hooks, what a fresh process
imports, ranks that must be able to disagree on set order) calls ``subprocess`` itself.

The environment read before a script's first line (the interpreter's and torch's start-up
variables) is the zygote's own: one zygote is kept per distinct set of those values
(``zygote.start_signature``), started on first use and ended with this process; when a new
one would make more than ``_ZYGOTES``, the least recently used one with no running
children goes (none goes while all have some, so the bound is soft). The start-up hook that reads
accel's environment (accel-deepspeed.pth) runs in the child instead, once the child has
its environment, as site.py would run it in a cold start.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.support.zygote import (
    CHILD_NAMES,
    COLD_STARTS,
    needs_cold_start,
    read_line,
    runnable,
    send_request,
    start_signature,
)

__all__ = ["COLD_STARTS", "WarmProcess", "popen", "run"]

ZYGOTE = Path(__file__).resolve().with_name("zygote.py")
_START_LIMIT_S = 120.0
_ZYGOTES = 4  # each holds ~200 MB (torch imported); tests use one or two start-up settings

_FileArgument = int | IO[Any] | None
# What ``popen`` passes to a warm child; any other ``Popen`` argument makes a cold start.
_WARM_ARGUMENTS = frozenset({"env", "cwd", "stdout", "stderr", "text", "start_new_session"})


class _Zygote:
    """One warm interpreter: its process, its socket, and what it costs to ask it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="accel-zygote-")
        self.socket_path = os.path.join(self._folder.name, "socket")
        zygote_env = {k: v for k, v in env.items() if k not in CHILD_NAMES}
        self.live = 0  # children not yet waited for
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), self.socket_path],
            env=zygote_env, cwd=self._folder.name, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + _START_LIMIT_S
        while not os.path.exists(self.socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = self._stderr()
                self.close()
                raise RuntimeError(
                    f"the warm interpreter ({ZYGOTE}) did not listen on {self.socket_path} "
                    f"within {_START_LIMIT_S:.0f} s: {said}"
                )
            time.sleep(0.005)

    def _stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return "it is still running"
        said = self.process.stderr.read().decode()[-2000:]
        return f"exit status {self.process.returncode}: {said}"

    def fork(self, request: dict[str, Any], fds: list[int]) -> tuple[int, socket.socket]:
        """Have the zygote fork ``request`` (zygote.py's protocol) with ``fds``; returns the
        child's pid and the connection its return code will arrive on."""
        argv = request["argv"]
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.socket_path)
            send_request(connection, request, fds)
            answer = read_line(connection, timeout=_START_LIMIT_S)
        except (OSError, TimeoutError) as error:
            connection.close()
            raise RuntimeError(
                f"the warm interpreter did not fork {argv}: {error!r}; {self._stderr()}"
            ) from error
        reply = {} if answer is None else json.loads(answer)
        if "pid" not in reply:
            connection.close()
            said = reply or self._stderr()
            raise RuntimeError(f"the warm interpreter did not fork {argv}: {said}")
        return int(reply["pid"]), connection

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # its lifeline: the zygote exits at its end
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        self._folder.cleanup()


_zygotes: dict[tuple[tuple[str, str], ...], _Zygote] = {}  # least recently used first
_zygotes_lock = threading.Lock()
_OWNER = os.getpid()  # a fork of this process must not end the zygotes at its exit


def _zygote_for(env: Mapping[str, str]) -> _Zygote:
    """The zygote for ``env``'s start-up settings, with one more child counted on it (under
    the lock, so that no other thread closes it as idle meanwhile)."""
    signature = start_signature(env)
    with _zygotes_lock:
        zygote = _zygotes.pop(signature, None)
        if zygote is not None and zygote.process.poll() is not None:
            zygote.close()  # it died (its children's clients were told): start another
            zygote = None
        if zygote is None:
            idle = [key for key, old in _zygotes.items() if old.live == 0]
            if len(_zygotes) >= _ZYGOTES and idle:
                _zygotes.pop(idle[0]).close()
            zygote = _Zygote(env)
        _zygotes[signature] = zygote
        zygote.live += 1
        return zygote


def _uncount(zygote: _Zygote) -> None:
    with _zygotes_lock:
        zygote.live -= 1


@atexit.register
def _close_zygotes() -> None:
    if os.getpid() != _OWNER:
        return
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


class WarmProcess:
    """A process forked by the zygote, with the part of ``subprocess.Popen`` tests use:
    ``pid``, ``returncode``, ``stdout``/``stderr`` (pipes), ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, args: list[str], zygote: _Zygote, pid: int, connection: socket.socket,
                 stdout: IO[Any] | None, stderr: IO[Any] | None) -> None:  # fmt: skip
        self.args = args
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None
        self.stdout = stdout
        self.stderr = stderr
        self._connection = connection
        self._lock = threading.Lock()
        self._readers: list[tuple[threading.Thread, list[Any]]] | None = None

    def _collect(self, timeout: float | None) -> int | None:
        # A poll while another thread waits answers at once, as Popen's does.
        if not self._lock.acquire(blocking=timeout != 0):
            return self.returncode
        try:
            if self.returncode is None:
                try:
                    line = read_line(self._connection, timeout)
                except TimeoutError:
                    return None
                if line is not None:  # set before the zygote may reap it and free its pid
                    self.returncode = int(json.loads(line)["returncode"])
                self._connection.close()  # the zygote reaps the child now
                _uncount(self._zygote)
                if line is None:
                    raise RuntimeError(
                        f"the warm interpreter ended before pid {self.pid} did, so its exit "
                        "status is unknown"
                    )
            return self.returncode
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        return self._collect(timeout=0)

    def wait(self, timeout: float | None = None) -> int:
        returncode = self._collect(timeout)
        if returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr (where they are pipes) to their ends, then wait."""
        if self._readers is None:
            self._readers = [self._reader(stream) for stream in (self.stdout, self.stderr)]
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader, _ in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        results = [outcome[0] if outcome else None for _, outcome in self._readers]
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        for result in results:
            if isinstance(result, BaseException):
                raise result  # what reading a stream raised (text that does not decode)
        return results[0], results[1]

    @staticmethod
    def _reader(stream: IO[Any] | None) -> tuple[threading.Thread, list[Any]]:
        """A thread reading ``stream`` to its end into a one-item list (the text, or what
        reading raised)."""
        outcome: list[Any] = []

        def read() -> None:
            if stream is not None:
                try:
                    outcome.append(stream.read())
                except Exception as error:
                    outcome.append(error)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        return reader, outcome

    def send_signal(self, sig: int) -> None:
        # An ended child stays a zombie until collected, so its pid is still its own.
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> WarmProcess:
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _warm_argv(args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], bool] | None:
    """``args`` after the interpreter and whether ``-u`` came first, when the zygote can
    run them; else None (other commands, interpreter options, a cold start asked for or
    needed)."""
    argv = [os.fspath(arg) for arg in args]
    if argv[:1] != [sys.executable] or needs_cold_start(os.environ) or needs_cold_start(env):
        return None
    return runnable(argv[1:])


def _child_end(argument: _FileArgument, default: int, opened: list[int]) -> tuple[int, int | None]:
    """The descriptor the child gets for ``argument`` and, for a pipe, the end we keep."""
    if argument is None:
        return default, None
    if argument == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd, None
    if argument == subprocess.PIPE:
        read_end, write_end = os.pipe()
        child, ours = (read_end, write_end) if default == 0 else (write_end, read_end)
        opened.append(child)
        return child, ours
    return (argument if isinstance(argument, int) else argument.fileno()), None


def popen(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdout: _FileArgument = None,
    stderr: _FileArgument = None,
    text: bool = False,
    start_new_session: bool = False,
    **cold_only: Any,
) -> WarmProcess | subprocess.Popen[Any]:
    """``subprocess.Popen(args, ...)``, forked warm where it can be (see the module)."""
    env = dict(os.environ if env is None else env)
    warm_argv = _warm_argv(args, env)
    if warm_argv is None or cold_only:
        return subprocess.Popen(
            args, env=env, cwd=cwd, stdout=stdout, stderr=stderr, text=text,
            start_new_session=start_new_session, **cold_only,
        )  # fmt: skip
    opened: list[int] = []  # the child's ends: closed here once the zygote has its copies
    ours: list[int | None] = []  # the pipe ends this process reads
    try:
        stdin_fd, _ = _child_end(subprocess.DEVNULL, 0, opened)
        stdout_fd, stdout_ours = _child_end(stdout, 1, opened)
        ours.append(stdout_ours)
        if stderr == subprocess.STDOUT:
            stderr_fd, stderr_ours = stdout_fd, None
        else:
            stderr_fd, stderr_ours = _child_end(stderr, 2, opened)
        ours.append(stderr_ours)
        argv, unbuffered = warm_argv
        request = {
            "argv": argv, "env": env, "cwd": os.fspath(cwd or os.getcwd()), "fds": [0, 1, 2],
            "new_session": start_new_session, "unbuffered": unbuffered,
        }  # fmt: skip
        zygote = _zygote_for(env)
        try:
            pid, connection = zygote.fork(request, [stdin_fd, stdout_fd, stderr_fd])
        except BaseException:
            _uncount(zygote)
            raise
    except BaseException:
        for fd in ours:
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in opened:
            os.close(fd)
    mode = "r" if text else "rb"
    return WarmProcess(
        list(map(os.fspath, args)), zygote, pid, connection,
        None if stdout_ours is None else open(stdout_ours, mode),
        None if stderr_ours is None else open(stderr_ours, mode),
    )  # fmt: skip


def run(
    args: Sequence[str],
    *,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, ...)``, forked warm where it can be (see the module)."""
    env = kwargs.get("env")
    if _warm_argv(args, os.environ if env is None else env) is None or not (
        set(kwargs) <= _WARM_ARGUMENTS
    ):
        return subprocess.run(
            args, timeout=timeout, check=check, capture_output=capture_output, **kwargs
        )
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process = popen(args, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    result = subprocess.CompletedProcess(list(args), process.wait(), out, err)
    if check:
        result.check_returncode()
    return result
