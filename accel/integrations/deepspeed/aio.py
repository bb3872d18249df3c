"""DeepSpeed's ``async_io`` module (``aio_handle``) over :mod:`accel.io`.

ZeRO-Infinity swaps optimizer states and parameters through
``AsyncIOBuilder().load().aio_handle(block_size, queue_depth, ...)``. This module gives
that object with DeepSpeed's methods and return values, on accel's engine, without
libaio or a compiler. One difference, on purpose: where DeepSpeed prints and returns -1
(a missing directory, a short read, a full disk), these raise an exception naming the
file, so a failed write can never pass for a done one.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Literal

import torch

from accel._validate import check_tensor
from accel.integrations.deepspeed.kernels import DeepSpeedModule
from accel.io import AsyncIO, locked

DEEPSPEED_ALIGNMENT = 512
"""Bytes per parallel slice in DeepSpeed's ``aio_handle.get_alignment()``."""


class aio_handle:
    """DeepSpeed's ``aio_handle``: parallel, optionally asynchronous tensor file I/O.

    ``queue_depth * intra_op_parallelism`` threads (at most 64) move ``block_size`` blocks;
    ``single_submit`` and ``overlap_events`` are libaio submission details with no
    equivalent here and are kept only for the getters.

    The methods take DeepSpeed's arguments and return DeepSpeed's values; what differs is
    said on each. Making a handle raises ``ValueError`` for a ``block_size`` that is not a
    positive ``int``, or a ``queue_depth`` or ``intra_op_parallelism`` that is not an
    integer >= 1. Every I/O method checks its input before any I/O: ``TypeError`` when
    ``buffer`` is not a ``torch.Tensor``; ``ValueError`` when it is not a dense, contiguous
    CPU tensor (or is a lazy conjugate or negative view), when ``file_offset`` is not an
    integer >= 0, or when the path is a FIFO or socket; ``RuntimeError`` when the handle was
    made in another process (before a ``fork``). Where DeepSpeed prints and returns -1,
    these raise, naming the file: a file that cannot be opened (``OSError``) or is shorter
    than the read (``EOFError``) from the call itself, asynchronous or not; a transfer that
    fails (``OSError``, a full disk say) from the call when it waits and from :meth:`wait`
    otherwise. ``validate`` reads the file's bytes back plainly once the transfer ends and
    raises ``OSError`` if they differ from the buffer's (from :meth:`wait` when
    asynchronous).
    """

    def __init__(
        self,
        block_size: int = 1024 * 1024,
        queue_depth: int = 128,
        single_submit: bool = False,
        overlap_events: bool = False,
        intra_op_parallelism: int = 1,
    ) -> None:
        if not isinstance(intra_op_parallelism, int) or intra_op_parallelism < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(
                f"intra_op_parallelism must be an integer >= 1, got {intra_op_parallelism!r}"
            )
        if not isinstance(queue_depth, int) or queue_depth < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"queue_depth must be an integer >= 1, got {queue_depth!r}")
        self._block_size = block_size
        self._queue_depth = queue_depth
        self._single_submit = bool(single_submit)
        self._overlap_events = bool(overlap_events)
        self._intra_op_parallelism = intra_op_parallelism
        threads = min(queue_depth * intra_op_parallelism, 64)
        self._engine = AsyncIO(block_size=block_size, queue_depth=threads)
        self._validations: list[tuple[torch.Tensor, str, int, bool]] = []
        self._lock = threading.Lock()

    # -- getters -------------------------------------------------------------------------
    def get_block_size(self) -> int:
        """Bytes per system call."""
        return self._block_size

    def get_queue_depth(self) -> int:
        """Requests in flight per thread (DeepSpeed's libaio depth)."""
        return self._queue_depth

    def get_single_submit(self) -> bool:
        """As given (no effect: a libaio submission detail)."""
        return self._single_submit

    def get_overlap_events(self) -> bool:
        """As given (no effect: a libaio submission detail)."""
        return self._overlap_events

    def get_intra_op_parallelism(self) -> int:
        """Threads per request, as DeepSpeed counts them."""
        return self._intra_op_parallelism

    def get_alignment(self) -> int:
        """The byte multiple DeepSpeed sizes its I/O buffers to: 512 per parallel slice, as
        DeepSpeed's handle answers (its ``O_DIRECT_ALIGNMENT``). ``deepspeed.io``'s
        ``FastFileWriter`` asserts its pinned buffer and file offsets are multiples of it.
        accel.io needs no alignment: a part not aligned to 4096 bytes goes through the page
        cache."""
        return self._intra_op_parallelism * DEEPSPEED_ALIGNMENT

    # -- I/O -----------------------------------------------------------------------------
    def read(
        self, buffer: torch.Tensor, filename: str, validate: bool, file_offset: int = 0
    ) -> int:
        """Synchronous read of ``buffer.nbytes`` bytes at ``file_offset``; returns 0."""
        return self._synchronous("read", buffer, filename, validate, file_offset)

    def write(
        self, buffer: torch.Tensor, filename: str, validate: bool, file_offset: int = 0
    ) -> int:
        """Synchronous write of the whole buffer at ``file_offset``; returns 0."""
        return self._synchronous("write", buffer, filename, validate, file_offset)

    def _synchronous(
        self,
        direction: Literal["read", "write"],
        buffer: torch.Tensor,
        filename: str,
        validate: bool,
        file_offset: int,
    ) -> int:
        submit = self._engine.read if direction == "read" else self._engine.write
        submit(buffer, filename, file_offset).result()
        if validate:
            _validate(buffer, filename, file_offset, direction)
        return 0

    def pread(
        self,
        buffer: torch.Tensor,
        filename: str,
        validate: bool,
        async_op: bool | None = None,
        file_offset: int = 0,
        **keywords: bool,
    ) -> int:
        """Parallel read; asynchronous returns 0 (then :meth:`wait`), synchronous waits for
        every request of the handle and returns :meth:`wait`'s count.

        The fourth argument is DeepSpeed's ``async``, a Python keyword: pass it positionally, as
        ``async_op``, or as ``**{"async": True}``; missing, given twice or beside another
        keyword, it is a ``TypeError``.
        """
        asynchronous = _async_argument("pread", async_op, keywords)
        self._engine.read(buffer, filename, file_offset)
        return self._after_submit(buffer, filename, file_offset, validate, asynchronous, "read")

    def pwrite(
        self,
        buffer: torch.Tensor,
        filename: str,
        validate: bool,
        async_op: bool | None = None,
        file_offset: int = 0,
        **keywords: bool,
    ) -> int:
        """Parallel write, as :meth:`pread`; keep ``buffer`` unchanged until it ends."""
        asynchronous = _async_argument("pwrite", async_op, keywords)
        self._engine.write(buffer, filename, file_offset)
        return self._after_submit(buffer, filename, file_offset, validate, asynchronous, "write")

    def sync_pread(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """:meth:`pread`, waited for: returns :meth:`wait`'s count."""
        return self.pread(buffer, filename, False, False, file_offset)

    def sync_pwrite(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """:meth:`pwrite`, waited for: returns :meth:`wait`'s count."""
        return self.pwrite(buffer, filename, False, False, file_offset)

    def async_pread(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """Start a :meth:`pread`; returns 0, and :meth:`wait` counts it."""
        return self.pread(buffer, filename, False, True, file_offset)

    def async_pwrite(
        self,
        buffer: torch.Tensor,
        filename: str | int | None = None,
        file_offset: int = 0,
        fd: int | None = None,
    ) -> int:
        """Start a :meth:`pwrite` to a path (``filename``) or an open descriptor (``fd``, or
        an ``int`` in ``filename``'s place, as DeepSpeed's two overloads take them); returns 0.

        Both or neither given is a ``TypeError``; a descriptor opened with O_APPEND is a
        ``ValueError``; one opened with O_DIRECT takes any size and offset.
        """
        if (filename is None) == (fd is None):
            raise TypeError(
                "async_pwrite() takes a filename or an fd (exactly one), got "
                f"filename={filename!r}, fd={fd!r}"
            )
        target = fd if filename is None else filename
        assert target is not None
        self._engine.write(buffer, target, file_offset)
        return 0

    def wait(self) -> int:
        """Wait for everything started; returns how many requests ended since the last wait,
        leaving out those a synchronous :meth:`read` or :meth:`write` already waited for (0 when
        none was pending, where DeepSpeed asserts).

        The first failure is raised once all have ended; a read whose buffer's storage was
        given other memory while it ran is a ``RuntimeError`` (:meth:`accel.io.IORequest.result`).
        """
        with self._lock:  # taken first: a failed request must not leave them for later
            pending, self._validations = self._validations, []
        completed = self._engine.wait()
        for buffer, filename, offset, is_read in pending:
            _validate(buffer, filename, offset, "read" if is_read else "write")
        return completed

    # -- pinned buffers ------------------------------------------------------------------
    # DeepSpeed 0.19 keeps one manager of locked buffers per process, shared by every
    # handle and its pin_memory op: accel.io.locked is that manager.
    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A page-aligned, page-locked 1-D buffer, kept until :meth:`free_cpu_locked_tensor`
        (by this or any handle) as DeepSpeed keeps it; ``num_elem`` not an ``int`` >= 0 is a
        ``ValueError``."""
        return locked.new_locked_tensor(
            num_elem, check_tensor(example_tensor, "example_tensor").dtype
        )

    def free_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Release a buffer from :meth:`new_cpu_locked_tensor` of any handle (its memory
        returns when the last reference goes): ``True`` if ``tensor`` starts one, else ``False``."""
        return locked.free_locked(check_tensor(tensor).data_ptr())

    def is_pinned(self, buffer: torch.Tensor) -> bool:
        """Whether ``buffer`` is page-locked memory, as DeepSpeed's handle answers it:
        torch-pinned, or inside a buffer from :meth:`new_cpu_locked_tensor` (a slice of one
        counts); ``False`` off the CPU.

        DeepSpeed writes a "pinned" optimizer state from its swap buffer instead of the tensor
        itself (an empty tensor for a fresh state), so an ordinary tensor must never count as
        pinned, whatever its address: ZeRO-Infinity would write an empty file in place of that
        state.
        """
        if not check_tensor(buffer, "buffer").is_cpu:
            return False
        return locked.is_pinned_or_locked(buffer)

    def _after_submit(
        self,
        buffer: torch.Tensor,
        filename: str,
        offset: int,
        validate: bool,
        async_op: bool,
        kind: str,
    ) -> int:
        if validate:
            with self._lock:
                self._validations.append((buffer, filename, offset, kind == "read"))
        return 0 if async_op else self.wait()


def _async_argument(method: str, async_op: bool | None, keywords: dict[str, bool]) -> bool:
    """DeepSpeed's ``async`` argument, given positionally or as the keyword ``async``."""
    unknown = sorted(set(keywords) - {"async"})
    if unknown:
        raise TypeError(f"{method}() got unexpected keyword arguments: {', '.join(unknown)}")
    if "async" in keywords:
        if async_op is not None:
            raise TypeError(f"{method}() got async twice (positionally and as a keyword)")
        return bool(keywords["async"])
    if async_op is None:
        raise TypeError(f"{method}() missing its 'async' argument (True or False)")
    return bool(async_op)


def _validate(buffer: torch.Tensor, filename: str | int, offset: int, kind: str) -> None:
    """DeepSpeed's ``validate``: the file's bytes equal the buffer's, read back plainly."""
    nbytes = buffer.numel() * buffer.element_size()
    if isinstance(filename, int):  # the caller's descriptor: read it, never close it
        on_disk = os.pread(filename, nbytes, offset)
    else:
        with open(filename, "rb") as handle:
            handle.seek(offset)
            on_disk = handle.read(nbytes)
    if on_disk != ctypes.string_at(buffer.data_ptr(), nbytes):
        raise OSError(f"{filename}: validation after {kind} failed: file and buffer differ")


def aio_read(buffer: torch.Tensor, filename: str, block_size: int, queue_depth: int,
             single_submit: bool, overlap_events: bool, validate: bool) -> int:  # fmt: skip
    """DeepSpeed's one-shot ``aio_read``: a new :class:`aio_handle` (its arguments checked
    as there) reads the whole buffer from offset 0 and waits; returns 0."""
    return aio_handle(block_size, queue_depth, single_submit, overlap_events).read(
        buffer, filename, validate
    )


def aio_write(buffer: torch.Tensor, filename: str, block_size: int, queue_depth: int,
              single_submit: bool, overlap_events: bool, validate: bool) -> int:  # fmt: skip
    """DeepSpeed's one-shot ``aio_write``, as :func:`aio_read`."""
    return aio_handle(block_size, queue_depth, single_submit, overlap_events).write(
        buffer, filename, validate
    )


def deepspeed_memcpy(dest: torch.Tensor, src: torch.Tensor) -> int:
    """DeepSpeed's ``deepspeed_memcpy``: ``dest.copy_(src)``; returns 0."""
    dest.copy_(src)
    return 0


class AsyncIOKernels(DeepSpeedModule):
    """The module object ``AsyncIOBuilder().load()`` returns."""

    aio_handle = aio_handle
    aio_read = staticmethod(aio_read)
    aio_write = staticmethod(aio_write)
    deepspeed_memcpy = staticmethod(deepspeed_memcpy)
