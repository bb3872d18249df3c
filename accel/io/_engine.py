"""The engine behind :mod:`accel.io`: a pool of threads doing ``pread``/``pwrite``.

Why threads and not io_uring or libaio: measured on this project's machine kind (ext4 on a
virtio disk), a pool of ``queue_depth`` threads each moving ``block_size`` blocks moves a
tensor as fast as Linux AIO (fio's libaio engine) on the same memory (docs/benchmarks.md,
"Async tensor I/O against fio"), works wherever ``pread`` does (io_uring is often blocked
by container seccomp profiles; libaio needs its headers or raw syscalls), and needs
nothing compiled: ``os.pwrite``/``os.preadv`` release the GIL for the system
call, and at megabyte blocks the Python around them costs well under 1%.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import operator
import os
import stat
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, cast

import torch
from typing_extensions import override

from accel._validate import check_memory_holds_values, check_tensor, check_writable
from accel.io import _lifetime

ALIGNMENT = 4096
"""Bytes O_DIRECT needs buffers, offsets and lengths aligned to (covers 512 and 4 KiB
logical blocks)."""

Kind = Literal["read", "write"]
PathLike = str | os.PathLike[str]

_engines: weakref.WeakSet[AsyncIO] = weakref.WeakSet()
logger = logging.getLogger("accel")


def _after_fork_in_child() -> None:
    # The pool's threads do not exist in the child, and its requests belong to the parent:
    # close the child's copies of their descriptors and refuse further use. No transfer
    # uses the child's memory, and a lock a parent thread held is held for ever here.
    try:
        for engine in list(_engines):
            engine.forget_after_fork()
    finally:  # storages get their memory back whatever happened above
        _lifetime.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class IORequest(Future[int]):
    """One read or write of a tensor; a ``concurrent.futures.Future`` whose result is the
    number of bytes moved. ``direct`` says whether O_DIRECT (no page cache) moved any of
    its bytes: the aligned part of the transfer (a request shorter than :data:`ALIGNMENT`
    bytes has none, and moves through the page cache)."""

    def __init__(self, kind: Kind, path: str, offset: int, nbytes: int, direct: bool) -> None:
        super().__init__()
        self.kind: Kind = kind
        self.path = path
        self.offset = offset
        self.nbytes = nbytes
        self.direct = direct
        self.delivered = False
        """Whether the caller took the outcome (``result()``/``exception()``)."""

    @override
    def result(self, timeout: float | None = None) -> int:
        """The bytes moved, once done; :meth:`AsyncIO.wait` then neither counts nor raises this
        request again.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as it takes.

        Returns:
            The number of bytes read or written.

        Raises:
            OSError: The transfer failed, or closing the file after it did (for a write,
                the bytes may not have reached the file).
            RuntimeError: A read's storage was given other memory while it ran, by a call
                that does not wait for transfers (docs/io.md): the bytes did not reach it.
            TimeoutError: ``timeout`` passed first.
        """
        try:
            return super().result(timeout)
        finally:
            if self.done():  # taken, raised or returned; a timeout took nothing
                self.delivered = True

    @override
    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The request's error, once done; as with :meth:`result`, this request is then the
        caller's, not :meth:`AsyncIO.wait`'s.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as it takes.

        Returns:
            The error, or ``None`` if the request succeeded.

        Raises:
            TimeoutError: ``timeout`` passed first.
        """
        try:
            return super().exception(timeout)
        finally:
            if self.done():
                self.delivered = True

    @override
    def __repr__(self) -> str:
        mode = "O_DIRECT" if self.direct else "buffered"
        return (
            f"<IORequest {self.kind} {self.nbytes} bytes at {self.offset} of {self.path!r} "
            f"({mode}, {self._state.lower()})>"  # pyright: ignore[reportAttributeAccessIssue]
        )


@dataclass(eq=False)  # identity: transfers live in a set
class _Transfer:
    """What the worker threads share for one request."""

    request: IORequest
    memory: _lifetime.Hold  # the tensor's storage and its memory, kept until the end
    view: memoryview
    direct_fd: int | None
    buffered_fd: int
    owned_fds: tuple[int, ...]  # opened for this request, closed when it ends
    blocks: list[tuple[int, int, bool]]  # (start, end, O_DIRECT) in the tensor's bytes
    claimed: list[bool]  # per block: taken by a run (each block runs once)
    remaining: int
    error: BaseException | None = None

    def close(self) -> OSError | None:
        """Close the descriptors opened for the request, each one whatever the others do.

        Returns:
            The first ``close`` failure (NFS reports a lost write-back there), else ``None``.
        """
        # Taken first: a child forked while this runs must not close these numbers again
        # (the parent may already have reused them).
        fds, self.owned_fds = self.owned_fds, ()
        return _close_all(fds)


def _close_all(fds: tuple[int, ...] | list[int]) -> OSError | None:
    """Close every descriptor in ``fds``; the first failure, else ``None``."""
    first: OSError | None = None
    for fd in fds:
        try:
            os.close(fd)  # closed even when it fails (Linux frees the number first)
        except OSError as error:
            if first is None:
                first = error
    return first


def _check_tensor(value: object, kind: Kind) -> torch.Tensor:
    tensor = check_tensor(value)
    if tensor.device.type != "cpu":
        raise ValueError(
            f"tensor must be on the CPU (file I/O is host-side), got one on {tensor.device}"
        )
    if tensor.layout != torch.strided or not tensor.is_contiguous():
        raise ValueError("tensor must be dense and contiguous (call .contiguous() first)")
    check_memory_holds_values(tensor, "tensor")
    if kind == "read":
        check_writable(tensor, "tensor")  # as torch's own in-place updates
    return tensor


def _readable_size(fd: int) -> int | None:
    """The bytes a read at offsets can find in ``fd``'s file: a regular file's size, a
    block device's (its ``st_size`` is 0); ``None`` where no size says it (a character
    device such as ``/dev/zero``, a ``/proc`` file): a read past the end then fails as it
    runs, "the file ended"."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) and not _is_procfs(fd):
        return os.fstat(fd).st_size
    if stat.S_ISBLK(mode):
        return os.lseek(fd, 0, os.SEEK_END)  # positional reads ignore the position
    return None


def _is_procfs(fd: int) -> bool:
    # /proc and /sys files are regular files of size 0 (or 4096) whatever they hold.
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc to ask: take the size as it is
        return False
    return where.startswith(("/proc/", "/sys/"))


_O_PATH: int = getattr(os, "O_PATH", 0)


def _check_fd(fd: int, kind: Kind) -> int:
    """``fd``'s status flags, if a positional transfer can use it: open, for ``kind``'s
    direction, and not in append mode (where the kernel puts every write at the end,
    whatever the offset)."""
    if not 0 <= fd < 2**31:
        raise ValueError(f"file descriptor must be an int in [0, 2**31), got {fd}")
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as error:
        raise OSError(error.errno, f"file descriptor {fd} is not open: {error.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise ValueError(
            f"file descriptor {fd} is a pipe or socket; accel.io reads and writes files at offsets"
        )
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            errno.EISDIR, f"file descriptor {fd} is a directory; accel.io reads and writes files"
        )
    access = flags & os.O_ACCMODE
    if flags & _O_PATH:
        raise ValueError(
            f"file descriptor {fd} was opened with O_PATH, which allows no reads or writes; "
            f"open it for {'reading' if kind == 'read' else 'writing'}"
        )
    if kind == "write" and access == os.O_RDONLY:
        raise ValueError(
            f"file descriptor {fd} is opened read-only; a write needs it opened with "
            "O_WRONLY or O_RDWR"
        )
    if kind == "read" and access == os.O_WRONLY:
        raise ValueError(
            f"file descriptor {fd} is opened write-only; a read needs it opened with "
            "O_RDONLY or O_RDWR"
        )
    if kind == "write" and flags & os.O_APPEND:
        raise ValueError(
            f"file descriptor {fd} was opened with O_APPEND, where every write lands at the "
            "end of the file whatever its offset; open it without O_APPEND"
        )
    return flags


def _buffered_twin(fd: int, flags: int, why: str) -> int:
    """A new descriptor of ``fd``'s file without O_DIRECT, for the parts of a request that
    O_DIRECT may not take (``why``: an unaligned buffer, offset or tail, or ``direct=False``).
    The caller's descriptor and its flags stay as they are."""
    try:
        return os.open(f"/proc/self/fd/{fd}", (flags & os.O_ACCMODE) | os.O_CLOEXEC)
    except OSError as error:
        raise OSError(
            error.errno,
            f"file descriptor {fd} was opened with O_DIRECT and {why}; reopening it without "
            f"O_DIRECT failed: {error.strerror}",
        ) from None


def _address_inside(tensor: torch.Tensor, held: _lifetime.Hold, kind: Kind, name: str) -> int:
    """``tensor``'s data address, once its bytes are checked to lie in the memory ``held``
    keeps: between the checks before the hold and the hold, another thread may have resized
    or replaced the tensor's storage."""
    address = tensor.data_ptr()
    nbytes = tensor.numel() * tensor.element_size()
    if not held.address <= address <= address + nbytes <= held.address + held.nbytes:
        raise RuntimeError(
            f"{kind} of {name!r}: the tensor's memory changed while the request was submitted "
            f"(its storage was resized or replaced, by another thread or the path's "
            f"__fspath__): its {nbytes} bytes at {address:#x} are not in the storage's "
            f"{held.nbytes} bytes at {held.address:#x} that the request holds; nothing was "
            "moved"
        )
    return address


_PRUNE_AT = 64  # finished requests kept before those already taken are dropped

_LAST_FILE_BYTE = 2**63 - 1  # off_t's largest value: where any file must end


def _check_offset(offset: object) -> int:
    # Any integer type (``__index__``: NumPy's too), as accel._validate.check_int takes it;
    # a bool is a mistake, not an offset.
    value: int | None = None
    if not isinstance(offset, bool):
        with contextlib.suppress(TypeError):
            value = operator.index(offset)  # type: ignore[arg-type]
    if value is None or value < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    return value


def _target(path: object) -> tuple[str, int | None]:
    """``path`` as ``(name, descriptor)``: a descriptor named ``<fd N>``, or a path's string
    (``os.fspath``, which runs a path object's own code) and ``None``."""
    if isinstance(path, bool):
        raise TypeError(f"path must be a path or a file descriptor (int), got bool {path!r}")
    if isinstance(path, int):
        return f"<fd {path}>", path
    try:
        name = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            "path must be a path (str, bytes, os.PathLike) or a file descriptor (int), got "
            f"{type(path).__name__} {path!r}"
        ) from None
    return cast(str, name), None


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (Python 3.11+); a WARNING on the ``accel`` logger before."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:
        logger.warning("%s", note)


def _report(finished: list[IORequest]) -> int:
    """How many of ``finished`` nobody took; raises the first failure among them."""
    unclaimed = [request for request in finished if not request.delivered]
    for request in unclaimed:
        error = super(IORequest, request).exception()  # unclaimed: not IORequest's
        if error is not None:
            raise error
    return len(unclaimed)


class AsyncIO:
    """Asynchronous reads and writes of CPU tensors at file offsets.

    ``direct=None`` uses O_DIRECT where the file system supports it and the buffer and
    offset are aligned to :data:`ALIGNMENT`, buffered I/O otherwise (each request reports
    which in ``request.direct``). Lengths need no alignment: an unaligned tail goes through
    the page cache. A descriptor the caller opened with O_DIRECT is used as it is for the
    aligned part; the rest goes through a second descriptor of the same file without
    O_DIRECT (all of it, under ``direct=False``). Under ``direct=True`` a descriptor must
    have been opened with O_DIRECT.

    Writes never truncate: bytes of the file outside the written range stay as they were.
    A request that fails raises from ``result()`` and from :meth:`wait`; a failed write is
    never reported as done.

    Args:
        block_size: Bytes per system call; any size, rounded up to a multiple of
            :data:`ALIGNMENT` (which O_DIRECT needs, and which keeps tiny sizes from costing
            a system call per few bytes).
        queue_depth: System calls in flight, in ``[1, 256]``.
        direct: ``None`` for O_DIRECT where possible; ``True`` requires it (misalignment,
            an unsupporting file system or a descriptor opened without O_DIRECT is an
            error); ``False`` never uses it.

    Raises:
        ValueError: ``block_size`` is not a positive ``int``, ``queue_depth`` is not an
            ``int`` in range, or ``direct`` is not ``None``, ``True`` or ``False``.
    """

    def __init__(
        self, *, block_size: int = 8 << 20, queue_depth: int = 8, direct: bool | None = None
    ) -> None:
        if (
            not isinstance(block_size, int)  # pyright: ignore[reportUnnecessaryIsInstance]
            or isinstance(block_size, bool)
            or block_size < 1
        ):
            raise ValueError(f"block_size must be a positive number of bytes, got {block_size!r}")
        if (
            not isinstance(queue_depth, int)  # pyright: ignore[reportUnnecessaryIsInstance]
            or isinstance(queue_depth, bool)
            or not 1 <= queue_depth <= 256
        ):
            raise ValueError(f"queue_depth must be an integer in [1, 256], got {queue_depth!r}")
        if direct is not None and not isinstance(direct, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"direct must be None (auto), True or False, got {direct!r}")
        self.block_size = block_size
        self._step = -(-block_size // ALIGNMENT) * ALIGNMENT  # bytes per system call
        self.queue_depth = queue_depth
        self.direct = direct
        self._pool = ThreadPoolExecutor(max_workers=queue_depth, thread_name_prefix="accel-io")
        self._lock = threading.Lock()
        self._in_flight: set[_Transfer] = set()
        self._finished: list[IORequest] = []
        self._prune_at = _PRUNE_AT
        self._idle = threading.Condition(self._lock)
        self._completing = threading.local()  # set while a request's callbacks run
        self._ending = 0  # requests out of flight whose callbacks are running
        self._pid = os.getpid()
        self._closed = False
        _engines.add(self)

    # -- public API ----------------------------------------------------------------------
    def write(self, tensor: torch.Tensor, path: PathLike | int, offset: int = 0) -> IORequest:
        """Start writing ``tensor``'s bytes to ``path`` at ``offset``.

        Args:
            tensor: A dense, contiguous CPU tensor; keep it unchanged until the request ends.
            path: A file path, or a descriptor open for writing (not with O_APPEND).
            offset: The byte offset in the file (any integer type, not a bool).

        Returns:
            The request, a ``concurrent.futures.Future`` of the bytes written.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``, or ``path`` is neither a path
                nor an ``int``.
            ValueError: ``tensor`` is not a dense, contiguous CPU tensor (or is a lazy
                conjugate or negative view), ``offset`` is not an integer >= 0, ``path`` is a
                FIFO or socket, a descriptor is read-only or open with O_APPEND, or
                ``direct=True`` and the buffer or offset is not aligned to
                :data:`ALIGNMENT` or a descriptor was opened without O_DIRECT.
            OSError: The file cannot be opened (with O_DIRECT, when required), or a descriptor
                is not open.
            RuntimeError: The engine is closed, or was created in another process (before a
                ``fork``); or the tensor's storage was resized or replaced while the request
                was submitted (by another thread, or the path's ``__fspath__``).
        """
        return self._submit("write", tensor, path, offset)

    def read(self, tensor: torch.Tensor, path: PathLike | int, offset: int = 0) -> IORequest:
        """Start filling ``tensor`` from ``path`` at ``offset``.

        Args:
            tensor: A dense, contiguous CPU tensor to fill.
            path: A file path, or a descriptor open for reading.
            offset: The byte offset in the file (any integer type, not a bool).

        Returns:
            The request, a ``concurrent.futures.Future`` of the bytes read.

        Raises:
            EOFError: The file ends before ``offset`` + the tensor's size.
            TypeError: ``tensor`` is not a ``torch.Tensor``, or ``path`` is neither a path
                nor an ``int``.
            ValueError: ``tensor`` is not a dense, contiguous CPU tensor (or is a lazy
                conjugate or negative view), ``offset`` is not an integer >= 0, ``path`` is a
                FIFO or socket, a descriptor is write-only, or ``direct=True`` and the buffer
                or offset is not aligned to :data:`ALIGNMENT` or a descriptor was opened
                without O_DIRECT.
            OSError: The file cannot be opened (with O_DIRECT, when required), or a descriptor
                is not open.
            RuntimeError: The engine is closed, or was created in another process (before a
                ``fork``); or the tensor's storage was resized or replaced while the request
                was submitted (by another thread, or the path's ``__fspath__``).
        """
        return self._submit("read", tensor, path, offset)

    def wait(self) -> int:
        """Wait for every request submitted so far.

        Returns:
            How many finished since the last ``wait()``, leaving out those whose outcome the
            caller already took with ``result()`` or ``exception()``.

        Raises:
            OSError: The first failure among those requests, after all have ended.
            RuntimeError: The engine is closed, or was created in another process; or that
                first failure was a read whose storage was given other memory (see
                :meth:`IORequest.result`).
        """
        self._check_usable()
        self._refuse_in_callback("wait")
        with self._idle:
            while self._in_flight or self._ending:
                self._idle.wait()
            finished, self._finished = self._finished, []
        return _report(finished)

    def pending(self) -> int:
        """The requests still in flight.

        Returns:
            Their number.
        """
        with self._lock:
            return len(self._in_flight)

    def close(self) -> None:
        """Wait for requests in flight, stop the threads, then raise the first failure no
        :meth:`wait` reported and no ``result()``/``exception()`` took, as :meth:`wait` does
        (idempotent: a second call does nothing).

        Raises:
            OSError: The first such failure; the engine is closed all the same.
            RuntimeError: Called from a request's done-callback; or that first failure was
                a read whose storage was given other memory (see :meth:`IORequest.result`).
        """
        if self._closed or os.getpid() != self._pid:
            self._closed = True
            return
        self._refuse_in_callback("close")
        with self._idle:
            while self._in_flight or self._ending:
                self._idle.wait()
            finished, self._finished = self._finished, []
        self._closed = True
        self._pool.shutdown(wait=True)
        _report(finished)

    def __enter__(self) -> AsyncIO:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: object,
    ) -> None:
        """:meth:`close`; its failure is raised unless an exception already leaves the
        ``with`` block, which then carries it as a note (Python 3.11+; a WARNING on the
        ``accel`` logger before)."""
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as failure:  # the block's own exception goes on
            _add_note(exc, f"accel.io: a request also failed: {type(failure).__name__}: {failure}")

    def __del__(self) -> None:
        """An engine dropped unclosed (DeepSpeed's ``aio_handle`` never closes) stops its
        threads and logs, as an ERROR on the ``accel`` logger, each failure that no
        :meth:`wait` reported and no ``result()``/``exception()`` took: there is no caller
        left to raise it to."""
        if getattr(self, "_closed", True) or os.getpid() != self._pid:
            return
        self._pool.shutdown(wait=False)
        for request in self._finished:
            error = None if request.delivered else super(IORequest, request).exception()
            if error is not None:
                logger.error(
                    "accel.io: an AsyncIO engine was dropped without close(), and this "
                    "failure was never reported: %s: %s", type(error).__name__, error
                )  # fmt: skip

    # -- internals -----------------------------------------------------------------------
    def _refuse_in_callback(self, what: str) -> None:
        # A request's callbacks run on the engine's threads, which the other requests need.
        if getattr(self._completing, "active", False):
            raise RuntimeError(
                f"AsyncIO.{what}() called from a request's done-callback, which runs on the "
                f"engine's own thread that requests in flight may need; call {what}() from "
                "another thread"
            )

    def _check_usable(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this AsyncIO engine was created in process {self._pid}; after fork, create "
                "a new one in the child (the parent's requests stay the parent's)"
            )
        if self._closed:
            raise RuntimeError("this AsyncIO engine is closed; create a new one")

    def forget_after_fork(self) -> None:
        """In a forked child: close its copies of the parent's descriptors (internal)."""
        for transfer in self._in_flight:
            # A failing close is the parent's to report: its own close of the same file
            # sees the write-back error, and the request is the parent's.
            transfer.close()
        self._in_flight = set()

    def _open(
        self, kind: Kind, path: str, direct_part: bool, owned: list[int]
    ) -> tuple[int | None, int]:
        """``(O_DIRECT descriptor or None, buffered descriptor)`` of ``path``, each appended
        to ``owned`` as soon as it is open (the caller closes them on any failure)."""
        if "\0" in os.fsdecode(path):  # a bytes path too
            raise ValueError(f"path {path!r} holds a NUL character, which no file name has")
        with contextlib.suppress(OSError):  # a missing file: open() says so below
            mode = os.stat(path).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                # open() would block until a peer appears, and there are no offsets.
                raise ValueError(
                    f"{path!r} is a FIFO or socket; accel.io reads and writes files at offsets"
                )
        access = (os.O_WRONLY if kind == "write" else os.O_RDONLY) | os.O_CLOEXEC
        create = os.O_CREAT if kind == "write" else 0
        try:
            # New files are the owner's alone: they hold parameters and optimizer states.
            owned.append(os.open(path, access | create, 0o600))
        except OSError as error:
            raise type(error)(
                error.errno, f"cannot open {path!r} for {kind}: {error.strerror}", path
            ) from None
        buffered = owned[-1]
        if stat.S_ISDIR(os.fstat(buffered).st_mode):  # open() refuses only a write of one
            raise IsADirectoryError(
                errno.EISDIR, f"cannot {kind} {path!r}: it is a directory", path
            )
        if self.direct is False or not direct_part:
            return None, buffered
        try:
            # Without O_CREAT: the file exists (opened above); one removed in between is an
            # error here, not a new file with open()'s default mode.
            owned.append(os.open(path, access | os.O_DIRECT))
        except OSError as error:
            if error.errno != errno.EINVAL or self.direct:
                hint = (
                    "; the file system may not support it (use direct=None to fall back to "
                    "buffered I/O)"
                    if error.errno == errno.EINVAL
                    else ""
                )
                raise OSError(
                    error.errno,
                    f"cannot open {path!r} with O_DIRECT ({error.strerror}){hint}",
                    path,
                ) from None
            return None, buffered  # file system without O_DIRECT (tmpfs): buffered
        direct = owned[-1]
        first, second = os.fstat(buffered), os.fstat(direct)
        if (first.st_dev, first.st_ino) != (second.st_dev, second.st_ino):
            # Renamed over between the two opens: the request's parts would go to two files.
            raise OSError(
                errno.ESTALE,
                f"{path!r} was replaced by another file while it was opened for {kind}; "
                "submit the request again",
                path,
            )
        return direct, buffered

    def _use_fd(
        self, kind: Kind, fd: int, direct_part: bool, owned: list[int]
    ) -> tuple[int | None, int]:
        """``(O_DIRECT descriptor or None, buffered descriptor)`` for the caller's ``fd``,
        as ``direct`` says; a descriptor opened here is appended to ``owned``."""
        flags = _check_fd(fd, kind)
        if not flags & os.O_DIRECT:
            if self.direct is True:
                raise ValueError(
                    f"file descriptor {fd} was opened without O_DIRECT, and this engine has "
                    "direct=True, which moves the aligned part of every request with O_DIRECT "
                    "or fails; open it with os.O_DIRECT, or use direct=None or direct=False"
                )
            return None, fd
        if self.direct is False:  # O_DIRECT never: all of it through a buffered twin
            why = "the engine has direct=False, which never uses O_DIRECT"
            owned.append(_buffered_twin(fd, flags, why))
            return None, owned[-1]
        why = f"this request has parts not aligned to {ALIGNMENT} bytes"
        owned.append(_buffered_twin(fd, flags, why))
        return (fd if direct_part else None), owned[-1]

    def _submit(
        self, kind: Kind, tensor: torch.Tensor, path: PathLike | int, offset: int
    ) -> IORequest:
        self._check_usable()
        # First: a path object's __fspath__ is the caller's code, which may resize or free
        # the tensor; nothing below reads the tensor's memory before it.
        name, fd = _target(path)
        tensor = _check_tensor(tensor, kind)
        offset = _check_offset(offset)
        nbytes = tensor.numel() * tensor.element_size()
        if offset + nbytes > _LAST_FILE_BYTE:
            raise ValueError(
                f"{kind} of {nbytes} bytes at offset {offset} of {name!r} ends past the "
                f"largest file offset the system takes ({_LAST_FILE_BYTE})"
            )
        storage = tensor.untyped_storage()
        holds: list[_lifetime.Hold] = []  # filled by hold(), so the cleanup below sees it
        owned: list[int] = []  # descriptors opened for this request
        transfer: _Transfer | None = None
        try:
            if nbytes:
                # The kernel moves the bytes in place (no copy); the hold keeps them
                # allocated. Taken before the address is read: from here on, the Python
                # calls that free the memory wait for this request.
                _lifetime.hold(storage, holds)
                address = _address_inside(tensor, holds[0], kind, name)
            else:
                address = tensor.data_ptr()
            aligned = address % ALIGNMENT == 0 and offset % ALIGNMENT == 0
            if self.direct is True and not aligned:
                raise ValueError(
                    f"O_DIRECT {kind} of {name!r} needs the buffer address and the offset "
                    f"aligned to {ALIGNMENT} bytes; got address % {ALIGNMENT} = "
                    f"{address % ALIGNMENT}, offset {offset} (allocate with "
                    "accel.io.aligned_empty)"
                )
            direct_part = aligned and nbytes >= ALIGNMENT  # what O_DIRECT can move
            if fd is not None:
                direct_fd, buffered_fd = self._use_fd(kind, fd, direct_part, owned)
            else:
                direct_fd, buffered_fd = self._open(kind, name, direct_part, owned)
            if kind == "read" and nbytes:
                size = _readable_size(buffered_fd)
                if size is not None and offset + nbytes > size:
                    raise EOFError(
                        f"{name}: reading {nbytes} bytes at offset {offset} needs "
                        f"{offset + nbytes} bytes, the file has {size}"
                    )
            blocks = self._blocks(nbytes, direct_fd is not None)
            direct = any(block_direct for _, _, block_direct in blocks)
            request = IORequest(kind, name, offset, nbytes, direct)
            if not blocks:  # an empty tensor: nothing to move
                fds, owned = owned, []
                request.set_running_or_notify_cancel()
                self._finish(request, self._close_failure(request, _close_all(fds)))
                return request
            view = memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")
            transfer = _Transfer(
                request, holds[0], view, direct_fd, buffered_fd, tuple(owned), blocks,
                claimed=[False] * len(blocks), remaining=len(blocks),
            )  # fmt: skip
            request.set_running_or_notify_cancel()
            with self._lock:
                self._in_flight.add(transfer)
        except BaseException:
            # Nothing queued yet: no block runs, so undo all here (Ctrl-C included). A close
            # failure of a descriptor nothing was written through loses no data.
            if transfer is not None:
                with self._lock:
                    self._in_flight.discard(transfer)
            _close_all(owned)
            for held in holds:
                _lifetime.release(held)
            raise
        try:
            for index in range(len(blocks)):
                try:
                    self._pool.submit(self._run_block, transfer, index)
                except RuntimeError:
                    # Either the pool takes no new work (the interpreter is shutting down:
                    # a write from an atexit handler) and queued nothing, or it queued the
                    # block and then could not start a thread for it ("can't start new
                    # thread": a pids limit, memory) and may never run it. Either way this
                    # thread moves the rest, so the request completes; a block runs only
                    # once, so a queued copy that a pool thread takes later does nothing.
                    for late in range(index, len(blocks)):
                        self._run_block(transfer, late)
                    break
        except BaseException as interrupted:  # Ctrl-C between two blocks, for one
            self._abandon(transfer, interrupted)
            raise
        return request

    def _abandon(self, transfer: _Transfer, interrupted: BaseException) -> None:
        # Blocks not yet run count as done, failed: the request ends (its storage given
        # back, its descriptors closed) once those already running have, instead of never.
        request = transfer.request
        with self._lock:
            if transfer.error is None:
                transfer.error = RuntimeError(
                    f"{request.path}: the {request.kind} of {request.nbytes} bytes at offset "
                    f"{request.offset} was interrupted while it was submitted "
                    f"({type(interrupted).__name__}); only part of it may have moved"
                )
        for index in range(len(transfer.blocks)):
            self._run_block(transfer, index)  # moves nothing (the error is set), or ran

    def _blocks(self, nbytes: int, direct: bool) -> list[tuple[int, int, bool]]:
        # O_DIRECT covers the aligned prefix; the unaligned tail goes through the cache.
        aligned_end = nbytes - nbytes % ALIGNMENT if direct else 0
        step = self._step
        blocks = [
            (start, min(start + step, aligned_end), True) for start in range(0, aligned_end, step)
        ]
        blocks += [
            (start, min(start + step, nbytes), False) for start in range(aligned_end, nbytes, step)
        ]
        return blocks

    def _run_block(self, transfer: _Transfer, index: int) -> None:
        with self._lock:
            if transfer.claimed[index]:
                return  # ran already (a copy the pool queued, then ran inline)
            transfer.claimed[index] = True
        start, end, direct = transfer.blocks[index]
        error: BaseException | None = None
        try:
            if transfer.error is None:  # a failed request stops moving data
                self._move(transfer, start, end, direct)
        except BaseException as caught:
            error = caught
        with self._lock:
            if error is not None and transfer.error is None:
                transfer.error = error
            transfer.remaining -= 1
            done = transfer.remaining == 0
        if done:
            self._end(transfer)

    def _end(self, transfer: _Transfer) -> None:
        # Each step runs whatever the one before did, and a step's failure is the request's
        # (the first one wins): the request always ends, and its storage is always given
        # back, else whoever waits for either waits for ever.
        request = transfer.request
        closing: BaseException | None
        try:
            closing = self._close_failure(request, transfer.close())
        except BaseException as error:
            closing = error
        if closing is not None:
            if transfer.error is None:
                transfer.error = closing
            elif closing is not transfer.error:  # the first failure wins; this one rides on it
                _add_note(transfer.error, f"then closing the file failed too: {closing}")
        try:
            # Given back before the request ends: whoever waits for it may then resize.
            moved = _lifetime.release(transfer.memory)
        except BaseException as error:
            moved = False
            if transfer.error is None:
                transfer.error = error
        if moved and request.kind == "read" and transfer.error is None:
            transfer.error = RuntimeError(
                f"{request.path}: the read of {request.nbytes} bytes at offset "
                f"{request.offset} did not reach the tensor: its storage was given other "
                "memory while the read ran, by a call that does not wait for transfers "
                "(not UntypedStorage.resize_, share_memory_ or Tensor.resize_, which do); "
                "the bytes went to the old memory, kept allocated until the read ended"
            )
        self._finish(request, transfer.error, transfer)

    @staticmethod
    def _close_failure(request: IORequest, error: OSError | None) -> OSError | None:
        """A failed ``close`` of the request's file as the request's failure, named."""
        if error is None:
            return None
        lost = (
            "; bytes the write stored may not have reached the file (a file system such "
            "as NFS reports a failed write-back here)"
            if request.kind == "write"
            else ""
        )
        return OSError(
            error.errno,
            f"{request.path}: closing the file after the {request.kind} of {request.nbytes} "
            f"bytes at offset {request.offset} failed: {error.strerror}{lost}",
            request.path,
        )

    def _move(self, transfer: _Transfer, start: int, end: int, direct: bool) -> None:
        request = transfer.request
        fd = transfer.direct_fd if direct else transfer.buffered_fd
        assert fd is not None
        position = start
        while position < end:
            chunk = transfer.view[position:end]
            where = request.offset + position
            try:
                if request.kind == "write":
                    moved = os.pwrite(fd, chunk, where)
                else:
                    moved = os.preadv(fd, [chunk], where)
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"{request.path}: {request.kind} of {end - position} bytes at offset "
                    f"{where} failed: {error.strerror}",
                    request.path,
                ) from None
            if moved == 0:
                what = "the file ended" if request.kind == "read" else "nothing was written"
                raise OSError(
                    errno.EIO,
                    f"{request.path}: {request.kind} at offset {where} moved 0 of "
                    f"{end - position} bytes ({what})",
                    request.path,
                )
            position += moved

    def _finish(
        self, request: IORequest, error: BaseException | None, transfer: _Transfer | None = None
    ) -> None:
        # No longer in flight before it ends (its callbacks and whoever its end wakes see
        # pending() without it), and among the finished only after its callbacks ran (a
        # failure one of them took is not wait()'s to raise); wait() waits for both.
        with self._idle:
            if transfer is not None:
                self._in_flight.discard(transfer)
            self._ending += 1
        inside, self._completing.active = getattr(self._completing, "active", False), True
        try:
            if error is not None:
                request.set_exception(error)
            else:
                request.set_result(request.nbytes)
        finally:
            self._completing.active = inside
            with self._idle:
                self._ending -= 1
                self._finished.append(request)
                if len(self._finished) >= self._prune_at:
                    # wait() needs only those whose outcome nobody took: without it, a
                    # caller using result() alone kept every request (and a failed one's
                    # storage, through its error) until a wait() that never came.
                    self._finished = [r for r in self._finished if not r.delivered]
                    self._prune_at = max(_PRUNE_AT, 2 * len(self._finished))
                self._idle.notify_all()
