"""The ``python`` a warm child finds as ``sys.executable``: what the child starts with it
(a launcher's ranks, above all) is forked from the zygote too, where it can be.

The zygote writes, beside its socket, a script named ``python`` that runs the real
interpreter with ``-S -E`` (it needs the standard library only) and calls :func:`main`.
Given ``[-u] SCRIPT | -m MODULE | -c CODE ...``, it asks the zygote for a child with its
own environment, working folder, CPUs and descriptors (0, 1, 2 and any it inherited, at
the same numbers), which the zygote forks when that child would start as the zygote did
(tests/support/zygote.py, ``_Start``), and stands in for it until it ends:
- a signal a launcher sends it (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) goes
  to the child's process group (the child has a session of its own);
- if it is killed (SIGKILL), the zygote kills the child;
- it ends as the child ended: the same exit status, or the same signal.
Once the child runs, the stand-in holds none of the descriptors it passed on but standard
error (for its own messages), so the child alone decides when a pipe it was given as
standard input or output, or as an inherited descriptor, ends.
Anything else (other interpreter options, another start, ``ACCEL_TESTS_COLD_STARTS=1``,
a zygote that has gone or cannot fork) replaces this process with the real interpreter
(``exec``): a cold start, as if the stand-in were not there.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sys
from typing import NoReturn

from zygote import MAX_FDS, needs_cold_start, read_line, runnable, send_request

_FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
)  # fmt: skip


def _inherited() -> list[int]:
    """The descriptors this process was given beyond 0, 1 and 2."""
    listed = [int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2]
    # The listing's own descriptor is gone by now: keep those still open.
    return sorted(fd for fd in listed if os.path.exists(f"/proc/self/fd/{fd}"))


def _end_as(returncode: int) -> NoReturn:
    """End with ``returncode``; a negative one by the same signal (no core file: the
    child has written one if it was to)."""
    if returncode >= 0:
        os._exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ValueError, OSError):
        signal.signal(sig, signal.SIG_DFL)  # SIGKILL and SIGSTOP need not (and cannot)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose default is to be ignored


def main(socket_path: str, interpreter: str) -> NoReturn:
    """Run ``sys.argv[1:]`` as ``interpreter`` would, forked by the zygote at
    ``socket_path`` where it can be (see the module)."""
    child: list[int] = []  # its pid, once the zygote has said it
    pending: list[int] = []  # signals that came before

    def cold() -> NoReturn:
        # A signal that has come (or comes now) ends this process, as it would a cold start:
        # blocked while the defaults go back (signal.signal runs the handlers of signals
        # already caught, so ``pending`` is complete after it), then let through.
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        for sig in pending:
            os.kill(os.getpid(), sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        os.execv(interpreter, [interpreter, *sys.argv[1:]])

    def forward(sig: int, _: object) -> None:
        if not child:
            pending.append(sig)
            return
        try:
            os.killpg(child[0], sig)
        except ProcessLookupError:  # no group yet (before its setsid): the child alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], sig)

    to_run = runnable(sys.argv[1:])
    inherited = _inherited()
    standard = all(os.path.exists(f"/proc/self/fd/{fd}") for fd in (0, 1, 2))
    if to_run is None or needs_cold_start(os.environ):
        cold()
    if not standard or len(inherited) + 3 > MAX_FDS:  # what the protocol cannot pass
        cold()
    argv, unbuffered = to_run
    for sig in _FORWARDED:
        signal.signal(sig, forward)
    fds = [0, 1, 2, *inherited]
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        request = {
            "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "fds": fds,
            "cpus": sorted(os.sched_getaffinity(0)), "new_session": True, "tied": True,
            "unbuffered": unbuffered, "same_start": True,
        }  # fmt: skip
        connection.connect(socket_path)
        send_request(connection, request, fds)
        answer = read_line(connection, timeout=None)
    except OSError:  # the zygote has gone (or the folder has): nothing was forked
        answer = None
    reply = {} if answer is None else json.loads(answer)
    if "pid" not in reply:  # refused (another start), or not forked: no child exists
        connection.close()
        cold()
    child.append(int(reply["pid"]))
    for sig in pending:
        forward(sig, None)
    _let_go_of(inherited)
    answer = read_line(connection, timeout=None)
    for sig in _FORWARDED:  # the child has ended: a cold process would not see these
        signal.signal(sig, signal.SIG_IGN)
    if answer is None:
        sys.stderr.write(
            f"{sys.argv[0]}: the warm interpreter ended before pid {child[0]} did; it "
            "killed that process, whose exit status is unknown\n"
        )
        os._exit(1)
    returncode = int(json.loads(answer)["returncode"])
    connection.close()  # the zygote reaps the child now
    _end_as(returncode)


def _let_go_of(inherited: list[int]) -> None:
    """Drop this process's copies of what the child was given: standard input and output
    go to /dev/null, the inherited descriptors close."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    for fd in inherited:
        os.close(fd)
