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
  behaviour, which the shared-memory code's dead-peer checks see);
- ``sys.executable`` is a stand-in ``python`` written beside the socket
  (tests/support/stand_in.py): what the child starts with it (a launcher's ranks) is
  forked from here too where it would start as this zygote did (the same start-up
  variables and CPUs, no cores pinned by ``accel run``'s plan), and starts cold otherwise.

What differs, and what a test that depends on it must start cold (``subprocess``):
torch is imported before the first line; every child of one zygote has the same string
hash seed (so the same set order: ranks forked here, by a test or by a launcher through
the stand-in, cannot disagree on it); the parent (``os.getppid()``) is this process, and
a launcher's ``Popen.pid`` is the stand-in's (whose ``/proc`` command line is not the
child's); umask, resource limits, signal dispositions and the signal mask are this
process's, not the starter's; a stand-in's ``wait()`` after ``kill()`` returns before the
child is dead (the zygote kills it once it sees the stand-in gone), and a child started
through a stand-in is killed when this zygote ends (warm.py ends an idle zygote when it
needs the room, and every zygote when the tests end); ``sys.executable`` is the
stand-in; ``sys.orig_argv`` names this file; standard input is ``/dev/null`` for what
warm.py starts (it passes no other); ``sys.stdout``'s buffering was chosen when this
process started (block-buffered, even where a child's stdout is a terminal) unless
``-u`` was given (``sys.flags`` does not show it); a signal sent to a stand-in reaches
the child's whole process group; a traceback has this file's frames above the script's;
a folder or zip file given as the script is not run (Python runs its ``__main__.py``); a
working folder that does not exist makes the child exit 1 where ``Popen`` raises.

Protocol, one connection per child: the client sends a 4-byte length with the child's
descriptors attached (SCM_RIGHTS), then that many bytes of JSON: ``argv`` after the
interpreter, ``env``, ``cwd``, ``fds`` (the number each descriptor gets in the child: 0,
1 and 2, then any a stand-in inherited), ``new_session``, ``unbuffered`` (``-u``), and
from the stand-in ``cpus`` (its affinity), ``same_start`` (refuse, with an ``error``,
unless the child would start as this zygote did) and ``tied`` (kill the child if
the client goes before the child ends, or when this zygote ends). The zygote answers
one JSON line with the child's ``pid`` (or an ``error``) and, when the child has ended,
one with its ``returncode`` (negative: the signal that ended it, as ``subprocess`` says
it); the child is reaped when the client closes the connection. The zygote exits when
its standard input (a pipe from the client) reaches its end, which happens when the
client's process ends.
"""

from __future__ import annotations

import array
import builtins
import contextlib
import fcntl
import gc
import importlib.machinery
import io
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COLD_STARTS = "ACCEL_TESTS_COLD_STARTS"  # "1": every process starts cold, none forked

# Read while the interpreter or torch starts, or by the start-up hooks accel installs
# (.pth files): a child must find these as a cold start would, so they select the zygote.
START_PREFIXES = ("PYTHON", "TORCH_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "LD_")
START_NAMES = frozenset({"SETUPTOOLS_USE_DISTUTILS"})
# Not in the zygote's environment: the child applies them itself, as a cold start would
# (PYTHONPATH to sys.path; ACCEL_DEEPSPEED when it runs accel-deepspeed.pth), or they are
# read later (TORCH_EXTENSIONS_DIR, when an extension is built or loaded).
CHILD_NAMES = frozenset({"PYTHONPATH", "ACCEL_DEEPSPEED", "TORCH_EXTENSIONS_DIR"})
# Left in the zygote's environment but out of the signature: read later, when an NCCL
# group is made (torchrun gives its ranks TORCH_NCCL_ASYNC_ERROR_HANDLING).
LATE_PREFIXES = ("TORCH_NCCL_",)
# ``accel run``'s plan: a rank whose plan pins cores pins them, and sets OMP_NUM_THREADS,
# before torch starts (accel/launch/worker.py), which a fork of this process cannot do.
RUN_PLAN = "ACCEL_RUN_PLAN"


def start_signature(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What a child's start-up depends on in ``env``: children of one zygote share it."""
    return tuple(
        sorted(
            (name, value)
            for name, value in env.items()
            if name not in CHILD_NAMES
            and not name.startswith(LATE_PREFIXES)
            and (name.startswith(START_PREFIXES) or name in START_NAMES)
        )
    )


def needs_cold_start(env: Mapping[str, str]) -> bool:
    """Whether a process with ``env`` must start cold whatever the zygote: asked for
    (``ACCEL_TESTS_COLD_STARTS``), or ``accel run``'s plan pins its cores."""
    if env.get(COLD_STARTS, "0") != "0":
        return True
    if RUN_PLAN not in env:
        return False
    try:
        return any(rank.get("cores") for rank in json.loads(env[RUN_PLAN])["ranks"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return True  # not a plan this file understands: cold, as the worker expects


def runnable(args: list[str]) -> tuple[list[str], bool] | None:
    """For ``python *args``: what the zygote runs (``SCRIPT | -m MODULE | -c CODE`` and
    their arguments) and whether ``-u`` came first; None for what it cannot run (other
    interpreter options, nothing to run)."""
    unbuffered = False
    while args[:1] == ["-u"]:
        unbuffered, args = True, args[1:]
    if not args:
        return None
    if args[0] in ("-m", "-c"):
        return (args, unbuffered) if len(args) >= 2 else None
    return None if args[0].startswith("-") else (args, unbuffered)


MAX_FDS = 64  # descriptors one request may carry: stdin, stdout, stderr and inherited ones
_INTERPRETER = sys.executable  # the real one: a child's sys.executable is the stand-in
_stand_in = ""  # the stand-in's path, once serve() has written it


@dataclass
class _Child:
    connection: socket.socket | None  # None once the client has gone
    tied: bool  # killed when its client (a stand-in) goes before it ends
    ended: bool = False  # a zombie, told to the client, reaped when the client lets go

    def kill_if_tied(self, pid: int) -> None:
        """Kill the child (``pid``, not reaped yet, so still its own) if it is tied and has
        not ended: nothing can report its end any more."""
        if self.tied and not self.ended:
            os.kill(pid, signal.SIGKILL)


# What every request names (the protocol in the module's docstring).
_REQUIRED = frozenset({"argv", "env", "cwd", "fds", "new_session"})


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: its JSON and the descriptors sent with its length (``fds`` in the JSON
    names the number each is to have in the child)."""
    fds = array.array("i")
    header, ancillary, _, _ = connection.recvmsg(4, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    try:
        if len(header) != 4:
            raise ValueError(f"{len(header)} header bytes came")
        (length,) = struct.unpack("!I", header)
        body = b""
        while len(body) < length:
            chunk = connection.recv(length - len(body))
            if not chunk:
                raise ValueError(f"the request ended after {len(body)} of {length} bytes")
            body += chunk
        request: dict[str, Any] = json.loads(body)
        if not isinstance(request, dict) or not request.keys() >= _REQUIRED:
            raise ValueError(f"a request names {sorted(_REQUIRED)}; this one is {request!r}")
        if len(request["fds"]) != len(fds):
            raise ValueError(f"{len(fds)} descriptors came for {request['fds']}")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, list(fds)


def send_request(connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """The client's half: ``request`` (the module's docstring lists its fields) with
    ``fds``, which the child gets as the numbers ``request["fds"]`` lists."""
    body = json.dumps(request).encode()
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    connection.sendmsg([struct.pack("!I", len(body))], rights)
    connection.sendall(body)


def read_line(connection: socket.socket, timeout: float | None) -> bytes | None:
    """One newline-ended message, or None at the connection's end; raises TimeoutError
    when none has begun within ``timeout`` seconds (the zygote writes each whole)."""
    with selectors.DefaultSelector() as selector:
        selector.register(connection, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
    connection.settimeout(None)
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(1)
        if not chunk:
            return None
        data += chunk
    return data


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
    child.kill_if_tied(pid)  # its stand-in ended (a launcher killed it)
    if child.connection is not None:
        selector.unregister(child.connection)
        child.connection.close()
        child.connection = None
    if child.ended:
        os.waitpid(pid, 0)
        del children[pid]


def _enter_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the fork, before the request runs: a session of its own if asked for (first, so
    that a signal sent to its group soon after its pid is known finds it), signals as a
    cold start has them, the client's descriptors on the numbers it gave."""
    if request["new_session"]:
        os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    targets: list[int] = request["fds"]
    # Above every number in play first, so that no dup2 below overwrites one still needed.
    floor = max([*targets, *fds]) + 1
    lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    for fd in fds:
        os.close(fd)
    for fd, target in zip(lifted, targets, strict=True):
        os.dup2(fd, target)  # inheritable, as a descriptor a cold child was given is
        os.close(fd)
    gc.enable()


def _unbuffer() -> None:
    """What ``python -u`` gives standard output and error: written through, unbuffered."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        raw.name = f"<{name}>"  # type: ignore[misc]  # as Python names its own
        stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors,
                                  write_through=True)  # fmt: skip
        stream.mode = "w"  # type: ignore[misc]
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def serve(path: str) -> dict[str, Any]:
    """Fork a child per request until standard input ends; returns only in a child, with
    the request that child is to run (its descriptors already in place)."""
    global _stand_in
    _stand_in = _write_stand_in(path)  # before the socket exists: clients wait for that
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: a client that finds ``path``
    # can connect (between bind and listen, a connection is refused).
    listener.bind(f"{path}.binding")
    listener.listen(64)
    os.rename(f"{path}.binding", path)
    import torch  # noqa: F401  -- the warm part: every child starts with torch imported

    own_start = _Start(start_signature(os.environ), sorted(os.sched_getaffinity(0)))
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
                for pid, child in children.items():
                    child.kill_if_tied(pid)
                sys.exit(0)
            elif key.data == "ended":
                os.read(wake_read, 4096)
                _notice_ends(children)
            elif isinstance(key.data, int):  # a child's client: it only ever closes
                if _closed(children[key.data].connection):
                    _let_go(key.data, children, selector)
            elif key.data == "listener":
                accepted = _accept(listener, own_start)
                if accepted is None:
                    continue
                connection, request, fds = accepted
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
                children[pid] = _Child(connection, tied=bool(request.get("tied")))
                selector.register(connection, selectors.EVENT_READ, pid)
                _answer(connection, {"pid": pid})


def _accept(
    listener: socket.socket, own_start: _Start
) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
    """The next client's connection, request and descriptors; None when there is nothing
    to fork (told to the client where it can be)."""
    try:
        connection, _ = listener.accept()
    except OSError as error:  # out of descriptors, or the client gave up
        sys.stderr.write(f"zygote: a connection was not accepted: {error}\n")
        return None
    try:
        request, fds = _receive(connection)
    except (OSError, ValueError, TypeError) as error:
        sys.stderr.write(f"zygote: a request was refused: {error!r}\n")
        connection.close()
        return None
    if request.get("same_start") and not own_start.shared_by(request):
        _answer(connection, {"error": "it does not start as this zygote did"})
        connection.close()
        for fd in fds:
            os.close(fd)
        return None
    return connection, request, fds


@dataclass(frozen=True)
class _Start:
    """What this zygote's children start with, beside torch: the start-up variables'
    values and the CPUs the process may run on (a launcher may narrow them, as taskset
    and numactl do, and OpenMP sizes its pool by them)."""

    signature: tuple[tuple[str, str], ...]
    cpus: list[int]

    def shared_by(self, request: dict[str, Any]) -> bool:
        """Whether a cold start of ``request`` would start as this zygote did."""
        env = request["env"]
        return (
            not needs_cold_start(env)
            and start_signature(env) == self.signature
            and request.get("cpus") == self.cpus
        )


def _write_stand_in(path: str) -> str:
    """Write, beside the socket at ``path``, the ``python`` children find as
    ``sys.executable`` (tests/support/stand_in.py): what they start with it is forked
    from here too where it can be."""
    stand_in = os.path.join(os.path.dirname(path), "python")
    support = os.path.dirname(os.path.abspath(__file__))
    with open(stand_in, "w", encoding="utf-8") as file:
        # -S -E: it needs nothing but the standard library, and starts in milliseconds.
        file.write(f"#!{_INTERPRETER} -SE\nimport sys\nsys.path.insert(0, {support!r})\n"
                   f"import stand_in\nstand_in.main({path!r}, {_INTERPRETER!r})\n")  # fmt: skip
    os.chmod(stand_in, 0o755)
    return stand_in


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
        sys.stderr.write(f"{_INTERPRETER}: can't open file {script!r}: [Errno {error.errno}] "
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
    sys.executable = _stand_in
    if request.get("unbuffered"):
        _unbuffer()
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
