"""A warm interpreter for the processes tests start: it imports torch once, then forks one
child per request, which runs the requested script, module or code as ``python`` would.

Run as ``python zygote.py SOCKET`` by tests/support/warm.py (read that module first: it
decides which starts may come from here). A cold ``python script.py`` spends ~1.4 s of CPU
importing torch on this project's 2-core machine (``time python -c "import torch"``); a
fork of this process starts with torch imported. What a child is given, as a cold start
would give it:
- the environment read while the interpreter and torch start (``PYTHON*``, ``TORCH_*``
  but for those read later, OpenMP's and MKL's variables) is this process's, so warm.py
  keeps one zygote per distinct set of those values;
- ``sys.path``: ``PYTHONPATH``'s entries (absolute), then the start-up hook that reads
  accel's environment (accel-deepspeed.pth) and ``sitecustomize`` run as site.py runs
  them, then the script's folder (symbolic links resolved; the working folder for
  ``-m``, ``''`` for ``-c``) goes in front;
- ``__main__`` is the script's module (``__file__`` absolute while it runs, ``sys.argv[0]``
  as given) and stays so until the interpreter ends; a script that does not exist ends
  with status 2 and Python's message;
- an ended child stays a zombie until its client asks for its status (``subprocess``'s
  behaviour, which the shared-memory code's dead-peer checks see).

What differs, and what a test that depends on it must start cold (``subprocess``):
torch is imported before the first line; every child of one zygote has the same string
hash seed (so the same set order: ranks forked here cannot disagree on it); the parent
(``os.getppid()``) is this process; ``sys.orig_argv`` names this file; standard input is
``/dev/null`` (warm.py passes no other); ``sys.stdout``'s buffering was chosen when this
process started (block-buffered, even where a child's stdout is a terminal); a traceback
has this file's frames above the script's; a folder or zip file given as the script is not
run (Python runs its ``__main__.py``); a working folder that does not exist makes the
child exit 1 where ``Popen`` raises.

Protocol, one connection per child: the client sends a 4-byte length with its stdin,
stdout and stderr attached (SCM_RIGHTS), then that many bytes of JSON (``argv`` after the
interpreter, ``env``, ``cwd``, ``new_session``). The zygote answers one JSON line with the
child's ``pid`` (or an ``error``) and, when the child has ended, one with its
``returncode`` (negative: the signal that ended it, as ``subprocess`` says it); the child
is reaped when the client closes the connection. The zygote exits when its standard input
(a pipe from the client) reaches its end, which happens when the client's process ends.
"""

from __future__ import annotations

import array
import builtins
import contextlib
import gc
import importlib.machinery
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
from dataclasses import dataclass
from typing import Any

_FDS = 3  # the child's stdin, stdout and stderr


@dataclass
class _Child:
    connection: socket.socket | None  # None once the client has gone
    ended: bool = False  # a zombie, told to the client, reaped when the client lets go


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


def _answer(connection: socket.socket, message: dict[str, Any]) -> None:
    # The client may have gone away; the child runs on, as a Popen'd child would.
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(message).encode() + b"\n")


def _returncode(info: os.waitid_result) -> int:
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _notice_ends(children: dict[int, _Child]) -> None:
    """Tell each newly ended child's client its return code; the child stays a zombie
    (``WNOWAIT``) until its client lets go, and is reaped now if it already has."""
    for pid, child in list(children.items()):
        if child.ended:
            continue
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            continue
        child.ended = True
        if child.connection is None:
            os.waitpid(pid, 0)
            del children[pid]
        else:
            _answer(child.connection, {"returncode": _returncode(info)})


def _closed(connection: socket.socket | None) -> bool:
    """Whether the client has closed ``connection`` (a client that closes with the return
    code unread resets it: ECONNRESET, not an end of file)."""
    if connection is None:
        return False
    try:
        return not connection.recv(1)
    except OSError:
        return True


def _let_go(pid: int, children: dict[int, _Child], selector: selectors.BaseSelector) -> None:
    """The client closed the child's connection: reap the child if it has ended (else when
    it ends)."""
    child = children[pid]
    if child.connection is not None:
        selector.unregister(child.connection)
        child.connection.close()
        child.connection = None
    if child.ended:
        os.waitpid(pid, 0)
        del children[pid]


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
    selector.register(wake_read, selectors.EVENT_READ, "ended")
    selector.register(0, selectors.EVENT_READ, "lifeline")
    children: dict[int, _Child] = {}
    while True:
        for key, _ in selector.select():
            if key.data == "lifeline" and not os.read(0, 4096):
                os.unlink(path)
                sys.exit(0)
            elif key.data == "ended":
                os.read(wake_read, 4096)
                _notice_ends(children)
            elif isinstance(key.data, int):  # a child's client: it only ever closes
                if _closed(children[key.data].connection):
                    _let_go(key.data, children, selector)
            elif key.data == "listener":
                try:
                    connection, _ = listener.accept()
                except OSError as error:  # out of descriptors, or the client gave up
                    sys.stderr.write(f"zygote: a connection was not accepted: {error}\n")
                    continue
                try:
                    request, fds = _receive(connection)
                except (OSError, ValueError) as error:
                    sys.stderr.write(f"zygote: a request was refused: {error}\n")
                    connection.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                gc.freeze()
                try:
                    pid = os.fork()
                except OSError as error:
                    _answer(connection, {"error": f"fork failed: {error}"})
                    pid = -1
                if pid == 0:
                    selector.close()
                    for fd in (wake_read, wake_write):
                        os.close(fd)
                    for child in children.values():
                        if child.connection is not None:
                            child.connection.close()
                    listener.close()
                    connection.close()
                    _enter_child(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                if pid < 0:
                    connection.close()
                    continue
                children[pid] = _Child(connection)
                selector.register(connection, selectors.EVENT_READ, pid)
                _answer(connection, {"pid": pid})


# .pth files whose work depends on the environment: the zygote starts without it (warm.py
# leaves their variables out of its environment) and each child runs them as site.py
# runs a .pth line, once the child has its own environment.
_START_HOOKS = ("accel-deepspeed.pth",)


def _run_start_hooks() -> None:
    """What site.py does after sys.path has PYTHONPATH: the environment's .pth lines, then
    ``sitecustomize`` (the zygote found none on its own path)."""
    for folder in site.getsitepackages():
        for name in _START_HOOKS:
            hook = os.path.join(folder, name)
            if os.path.exists(hook):
                with open(hook, encoding="utf-8") as lines:
                    for line in lines:
                        if line.startswith(("import ", "import\t")):
                            exec(line, {})
    if "sitecustomize" not in sys.modules:
        site.execsitecustomize()


def _run_script(path: str) -> None:
    """``python PATH``: PATH's code as ``__main__``, with an absolute ``__file__``."""
    script = os.path.abspath(path)
    try:
        with open(script, "rb") as file:
            source = file.read()
    except OSError as error:
        sys.stderr.write(f"{sys.executable}: can't open file {script!r}: [Errno {error.errno}] "
                         f"{error.strerror}\n")  # fmt: skip
        sys.exit(2)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __builtins__=builtins, __cached__=None)
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    sys.modules["__main__"] = main
    try:
        exec(compile(source, script, "exec", dont_inherit=True), main.__dict__)
    except SystemExit:
        raise  # Python exits at once: atexit handlers still see __file__
    except BaseException:
        _forget_file(main)
        raise
    _forget_file(main)


def _forget_file(main: types.ModuleType) -> None:
    """What Python's file runner does once the script has ended or raised."""
    del main.__dict__["__file__"], main.__dict__["__cached__"]


def _run(request: dict[str, Any]) -> None:
    """Become ``python ARGV`` in ``cwd`` with ``env``, as far as a script can tell."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    pythonpath = os.environ.get("PYTHONPATH", "")
    if pythonpath:
        sys.path[:0] = [os.path.abspath(entry) for entry in pythonpath.split(os.pathsep)]
        sys.path[:] = list(dict.fromkeys(sys.path))  # site.py's removeduppaths
    _run_start_hooks()
    folder_first = not sys.flags.safe_path  # -P or PYTHONSAFEPATH: no folder in front
    argv: list[str] = request["argv"]
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        if folder_first:
            sys.path.insert(0, os.getcwd())
        # What `python -m` calls; it runs the module in the current __main__'s namespace,
        # so it gets a fresh one (not this file's globals). It stays __main__ to the end,
        # which run_module would not leave it.
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        if folder_first:
            sys.path.insert(0, "")
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec", dont_inherit=True), main.__dict__)
    else:
        sys.argv = list(argv)
        if folder_first:
            sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))
        _run_script(argv[0])


if __name__ == "__main__":
    if not sys.flags.safe_path:
        del sys.path[0]  # this file's folder: a child's path is its own script's
    _run(serve(sys.argv[1]))
