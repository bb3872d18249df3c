"""A warm interpreter for the processes tests start: it imports torch once, then forks one
child per request, which runs the requested script, module or code as ``python`` would.

Run as ``python -P zygote.py SOCKET`` by tests/support/warm.py (read that module first: it
decides which starts may come from here). A cold ``python script.py`` spends ~1.4 s of CPU
importing torch on this project's 2-core machine (``time python -c "import torch"``); a
fork of this process starts with torch imported. The child differs from a cold start only
in what happens before its first line runs, and warm.py keeps every difference out that a
script could see:
- the environment read while the interpreter and torch start (``PYTHON*``, ``TORCH_*``,
  OpenMP's and MKL's variables) is this process's, so warm.py keeps one zygote per
  distinct set of those values; the start-up hook that reads accel's environment
  (accel-deepspeed.pth) runs in the child, once the child has its environment;
- ``sys.path`` gets the script's folder (or the working folder for ``-m``, ``''`` for
  ``-c``) and ``PYTHONPATH`` in front, as a cold start puts them;
- torch is in ``sys.modules`` already, accel is not (its imports read ``ACCEL_*`` variables
  the child sets first).

Protocol, one connection per child: the client sends a 4-byte length with its stdin,
stdout and stderr attached (SCM_RIGHTS), then that many bytes of JSON (``argv`` after the
interpreter, ``env``, ``cwd``, ``new_session``). The zygote answers one JSON line with the
child's ``pid`` and, when the child has ended, one with its ``returncode`` (negative: the
signal that ended it, as ``subprocess`` says it). The zygote exits when its standard input
(a pipe from the client) reaches its end, which happens when the client's process ends.
"""

from __future__ import annotations

import array
import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import site
import socket
import struct
import sys
import types
from typing import Any

_FDS = 3  # the child's stdin, stdout and stderr


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: its JSON and the three descriptors sent with its length."""
    fds = array.array("i")
    header, ancillary, _, _ = connection.recvmsg(4, socket.CMSG_SPACE(_FDS * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    try:
        if len(header) != 4 or len(fds) != _FDS:
            raise ValueError(f"{len(header)} header bytes and {len(fds)} descriptors came")
        (length,) = struct.unpack("!I", header)
        body = b""
        while len(body) < length:
            chunk = connection.recv(length - len(body))
            if not chunk:
                raise ValueError(f"the request ended after {len(body)} of {length} bytes")
            body += chunk
        request: dict[str, Any] = json.loads(body)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, list(fds)


def _answer(connection: socket.socket, message: dict[str, int]) -> None:
    # The client may have gone away; the child runs on, as a Popen'd child would.
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(message).encode() + b"\n")


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each ended child's client its return code."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            _answer(connection, {"returncode": os.waitstatus_to_exitcode(status)})
            connection.close()


def _enter_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the fork, before the request runs: signals as a cold start has them, the
    client's descriptors on 0, 1 and 2, a session of its own if asked for."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    gc.enable()


def serve(path: str) -> dict[str, Any]:
    """Fork a child per request until standard input ends; returns only in a child, with
    the request that child is to run (its descriptors already on 0, 1 and 2)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    import torch  # noqa: F401  -- the warm part: every child starts with torch imported

    gc.disable()  # no collections in here: they would dirty pages the children share
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(wake_read, selectors.EVENT_READ, "children")
    selector.register(0, selectors.EVENT_READ, "lifeline")
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.data == "lifeline" and not os.read(0, 4096):
                os.unlink(path)
                sys.exit(0)
            if key.data == "children":
                os.read(wake_read, 4096)
                _reap(children)
            if key.data == "listener":
                connection, _ = listener.accept()
                try:
                    request, fds = _receive(connection)
                except (OSError, ValueError) as error:
                    sys.stderr.write(f"zygote: a request was refused: {error}\n")
                    connection.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for fd in (wake_read, wake_write):
                        os.close(fd)
                    for open_socket in (listener, connection, *children.values()):
                        open_socket.close()
                    _enter_child(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                children[pid] = connection
                _answer(connection, {"pid": pid})


# .pth files whose work depends on the environment: the zygote starts without it (warm.py
# leaves their variables out of its environment) and each child runs them as site.py
# runs a .pth line, once the child has its own environment.
_START_HOOKS = ("accel-deepspeed.pth",)


def _run_start_hooks() -> None:
    for folder in site.getsitepackages():
        for name in _START_HOOKS:
            hook = os.path.join(folder, name)
            if os.path.exists(hook):
                with open(hook, encoding="utf-8") as lines:
                    for line in lines:
                        if line.startswith(("import ", "import\t")):
                            exec(line, {})


def _run(request: dict[str, Any]) -> None:
    """Become ``python ARGV`` in ``cwd`` with ``env``, as far as a script can tell."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _run_start_hooks()
    argv: list[str] = request["argv"]
    pythonpath = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        sys.path[:0] = [os.getcwd(), *pythonpath]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[:0] = ["", *pythonpath]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        sys.path[:0] = [os.path.dirname(os.path.abspath(argv[0])), *pythonpath]
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    _run(serve(sys.argv[1]))
