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
import threading

import torch

from accel.integrations.deepspeed.kernels import DeepSpeedModule
from accel.io import AsyncIO, locked

DEEPSPEED_ALIGNMENT = 512
"""Bytes per parallel slice in DeepSpeed's ``aio_handle.get_alignment()``."""


class aio_handle:
    """DeepSpeed's ``aio_handle``: parallel, optionally asynchronous tensor file I/O.

    ``queue_depth * intra_op_parallelism`` threads (at most 64) move ``block_size`` blocks;
    ``single_submit`` and ``overlap_events`` are libaio submission details with no
    equivalent here and are kept only for the getters.
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
        """Synchronous read of ``buffer.nbytes`` bytes; returns 0.

        Args:
            buffer: A dense, contiguous CPU tensor to fill.
            filename: The file's path.
            validate: Afterwards, read the file's bytes back plainly and check they equal the
                buffer's.
            file_offset: The byte offset in the file.

        Returns:
            0, as DeepSpeed's handle returns.

        Raises:
            EOFError: The file ends before ``file_offset`` + the buffer's size.
            TypeError: ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be opened or the read failed; or, with ``validate``, the
                file's bytes differ from the buffer's.
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        self._engine.read(buffer, filename, file_offset).result()
        if validate:
            _validate(buffer, filename, file_offset, "read")
        return 0

    def write(
        self, buffer: torch.Tensor, filename: str, validate: bool, file_offset: int = 0
    ) -> int:
        """Synchronous write; returns 0.

        Args:
            buffer: A dense, contiguous CPU tensor.
            filename: The file's path.
            validate: Afterwards, read the file's bytes back plainly and check they equal the
                buffer's.
            file_offset: The byte offset in the file.

        Returns:
            0, as DeepSpeed's handle returns.

        Raises:
            TypeError: ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be created or opened, or the write failed (a full disk);
                or, with ``validate``, the file's bytes differ from the buffer's.
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        self._engine.write(buffer, filename, file_offset).result()
        if validate:
            _validate(buffer, filename, file_offset, "write")
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
        """Parallel read; asynchronous returns 0 (then :meth:`wait`), synchronous waits and
        returns the number of operations completed. The fourth argument is DeepSpeed's
        ``async`` (a keyword Python code can only pass as ``**{"async": True}``).

        Args:
            buffer: A dense, contiguous CPU tensor to fill.
            filename: The file's path.
            validate: Once the transfer ends (in :meth:`wait` when asynchronous), read the
                file's bytes back plainly and check they equal the buffer's.
            async_op: DeepSpeed's ``async``: ``True`` to return at once, ``False`` to wait for
                this and every other request of the handle.
            file_offset: The byte offset in the file.
            **keywords: ``async`` only: DeepSpeed's keyword for ``async_op``.

        Returns:
            0 when asynchronous (:meth:`wait` counts the request); otherwise :meth:`wait`'s
            count of the operations completed, this one and any others the handle had started.

        Raises:
            TypeError: DeepSpeed's ``async`` is missing or given twice, another keyword is passed,
                or ``buffer`` is not a ``torch.Tensor``.
            EOFError: The file ends before ``file_offset`` + the buffer's size.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be opened; when synchronous, also what :meth:`wait` raises.
            RuntimeError: The handle was made in another process (before a ``fork``).
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
        """Parallel write; as :meth:`pread`.

        Args:
            buffer: A dense, contiguous CPU tensor; keep it unchanged until the write ends.
            filename: The file's path.
            validate: Once the transfer ends (in :meth:`wait` when asynchronous), read the
                file's bytes back plainly and check they equal the buffer's.
            async_op: DeepSpeed's ``async``: ``True`` to return at once, ``False`` to wait for
                this and every other request of the handle.
            file_offset: The byte offset in the file.
            **keywords: ``async`` only: DeepSpeed's keyword for ``async_op``.

        Returns:
            0 when asynchronous (:meth:`wait` counts the request); otherwise :meth:`wait`'s
            count of the operations completed, this one and any others the handle had started.

        Raises:
            TypeError: DeepSpeed's ``async`` is missing or given twice, another keyword is passed,
                or ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be created or opened; when synchronous, also what
                :meth:`wait` raises.
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        asynchronous = _async_argument("pwrite", async_op, keywords)
        self._engine.write(buffer, filename, file_offset)
        return self._after_submit(buffer, filename, file_offset, validate, asynchronous, "write")

    def sync_pread(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """Parallel read, waited for; returns the operations completed.

        Args:
            buffer: A dense, contiguous CPU tensor to fill.
            filename: The file's path.
            file_offset: The byte offset in the file.

        Returns:
            :meth:`wait`'s count: this read and any other request the handle had started.

        Raises:
            EOFError: The file ends before ``file_offset`` + the buffer's size.
            TypeError: ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be opened, or what :meth:`wait` raises.
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        return self.pread(buffer, filename, False, False, file_offset)

    def sync_pwrite(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """Parallel write, waited for; returns the operations completed.

        Args:
            buffer: A dense, contiguous CPU tensor.
            filename: The file's path.
            file_offset: The byte offset in the file.

        Returns:
            :meth:`wait`'s count: this write and any other request the handle had started.

        Raises:
            TypeError: ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be created or opened, or what :meth:`wait` raises.
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        return self.pwrite(buffer, filename, False, False, file_offset)

    def async_pread(self, buffer: torch.Tensor, filename: str, file_offset: int = 0) -> int:
        """Start a parallel read; returns 0, :meth:`wait` counts it.

        Args:
            buffer: A dense, contiguous CPU tensor to fill.
            filename: The file's path.
            file_offset: The byte offset in the file.

        Returns:
            0.

        Raises:
            EOFError: The file ends before ``file_offset`` + the buffer's size.
            TypeError: ``buffer`` is not a ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, or ``filename`` is a FIFO
                or socket.
            OSError: The file cannot be opened (a failed read is raised by :meth:`wait`).
            RuntimeError: The handle was made in another process (before a ``fork``).
        """
        return self.pread(buffer, filename, False, True, file_offset)

    def async_pwrite(
        self,
        buffer: torch.Tensor,
        filename: str | int | None = None,
        file_offset: int = 0,
        fd: int | None = None,
    ) -> int:
        """Start a parallel write to a path (``filename``) or an open descriptor (``fd``, or
        an ``int`` in its place, as DeepSpeed's two overloads take them); returns 0. A
        descriptor opened with O_DIRECT takes any size and offset.

        Args:
            buffer: A dense, contiguous CPU tensor; keep it unchanged until the write ends.
            filename: The file's path, or an open descriptor; ``None`` when ``fd`` is given.
            file_offset: The byte offset in the file.
            fd: A descriptor open for writing (not with O_APPEND); ``None`` when ``filename`` is
                given.

        Returns:
            0 (a failed write is raised by :meth:`wait`).

        Raises:
            TypeError: Both or neither of ``filename`` and ``fd`` are given, or ``buffer`` is not a
                ``torch.Tensor``.
            ValueError: ``buffer`` is not a dense, contiguous CPU tensor (or is a lazy conjugate or
                negative view), ``file_offset`` is not an integer >= 0, the path is a FIFO or
                socket, or the descriptor was opened with O_APPEND.
            OSError: The file cannot be created or opened, or the descriptor is not open.
            RuntimeError: The handle was made in another process (before a ``fork``).
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
        """Wait for everything started; returns how many operations completed (0 when
        none was pending, where DeepSpeed asserts).

        Returns:
            The number of requests that ended since the last wait, leaving out those a
            synchronous :meth:`read` or :meth:`write` already waited for.

        Raises:
            OSError: A request failed (the first failure, raised once all have ended), or a
                ``validate`` check found the file's bytes differ from the buffer's.
            RuntimeError: The handle was made in another process (before a ``fork``), or
                the first failure was a read whose buffer's storage was given other memory
                while it ran (:meth:`accel.io.IORequest.result`).
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
        """A page-aligned, page-locked buffer of ``num_elem`` elements of
        ``example_tensor``'s dtype, kept until :meth:`free_cpu_locked_tensor` (by this or
        any handle) as DeepSpeed keeps it.

        Args:
            num_elem: The number of elements, >= 0.
            example_tensor: A tensor whose dtype the buffer takes.

        Returns:
            A new, uninitialised 1-D CPU tensor.

        Raises:
            ValueError: ``num_elem`` is not an ``int`` >= 0.
        """
        return locked.new_locked_tensor(num_elem, example_tensor.dtype)

    def free_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Release a buffer from :meth:`new_cpu_locked_tensor` of any handle (memory
        returns when the last reference goes): True if ``tensor`` starts one, else False.

        Args:
            tensor: A buffer from :meth:`new_cpu_locked_tensor` (any tensor is accepted).

        Returns:
            ``True`` if a buffer started at ``tensor``'s first byte and is now released.
        """
        return locked.free_locked(tensor.data_ptr())

    def is_pinned(self, buffer: torch.Tensor) -> bool:
        """Whether ``buffer`` is page-locked memory, as DeepSpeed's handle answers it:
        torch-pinned, or lying inside a buffer from :meth:`new_cpu_locked_tensor` (a
        slice of one counts).

        DeepSpeed writes a "pinned" optimizer state from its swap buffer instead of the
        tensor itself (an empty tensor for a fresh state), so an ordinary tensor must never
        count as pinned, whatever its address: ZeRO-Infinity would write an empty file in
        place of that state.

        Args:
            buffer: Any tensor.

        Returns:
            ``True`` for a CPU tensor that is torch-pinned or lies inside such a buffer;
            ``False`` for every tensor off the CPU.
        """
        if not buffer.is_cpu:
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


def _validate(buffer: torch.Tensor, filename: str, offset: int, kind: str) -> None:
    """DeepSpeed's ``validate``: the file's bytes equal the buffer's, read back plainly."""
    nbytes = buffer.numel() * buffer.element_size()
    with open(filename, "rb") as handle:
        handle.seek(offset)
        on_disk = handle.read(nbytes)
    if on_disk != ctypes.string_at(buffer.data_ptr(), nbytes):
        raise OSError(f"{filename}: validation after {kind} failed: file and buffer differ")


def aio_read(buffer: torch.Tensor, filename: str, block_size: int, queue_depth: int,
             single_submit: bool, overlap_events: bool, validate: bool) -> int:  # fmt: skip
    """DeepSpeed's one-shot ``aio_read``; returns 0.

    A new :class:`aio_handle` reads the whole buffer from offset 0 and waits.

    Args:
        buffer: A dense, contiguous CPU tensor to fill.
        filename: The file's path.
        block_size: Bytes per system call.
        queue_depth: Requests in flight, at least 1 (at most 64 threads are used).
        single_submit: Kept for DeepSpeed's signature; no effect.
        overlap_events: Kept for DeepSpeed's signature; no effect.
        validate: Afterwards, read the file's bytes back plainly and check they equal the
            buffer's.

    Returns:
        0.

    Raises:
        ValueError: ``queue_depth`` is not an integer >= 1, ``block_size`` is not a positive
            ``int``, or as :meth:`aio_handle.read`.
        EOFError: As :meth:`aio_handle.read`.
        TypeError: As :meth:`aio_handle.read`.
        OSError: As :meth:`aio_handle.read`.
    """
    return aio_handle(block_size, queue_depth, single_submit, overlap_events).read(
        buffer, filename, validate
    )


def aio_write(buffer: torch.Tensor, filename: str, block_size: int, queue_depth: int,
              single_submit: bool, overlap_events: bool, validate: bool) -> int:  # fmt: skip
    """DeepSpeed's one-shot ``aio_write``; returns 0.

    A new :class:`aio_handle` writes the whole buffer at offset 0 and waits.

    Args:
        buffer: A dense, contiguous CPU tensor.
        filename: The file's path.
        block_size: Bytes per system call.
        queue_depth: Requests in flight, at least 1 (at most 64 threads are used).
        single_submit: Kept for DeepSpeed's signature; no effect.
        overlap_events: Kept for DeepSpeed's signature; no effect.
        validate: Afterwards, read the file's bytes back plainly and check they equal the
            buffer's.

    Returns:
        0.

    Raises:
        ValueError: ``queue_depth`` is not an integer >= 1, ``block_size`` is not a positive
            ``int``, or as :meth:`aio_handle.write`.
        TypeError: As :meth:`aio_handle.write`.
        OSError: As :meth:`aio_handle.write`.
    """
    return aio_handle(block_size, queue_depth, single_submit, overlap_events).write(
        buffer, filename, validate
    )


def deepspeed_memcpy(dest: torch.Tensor, src: torch.Tensor) -> int:
    """DeepSpeed's ``deepspeed_memcpy``: copy ``src`` into ``dest``; returns 0.

    Args:
        dest: The tensor written, in place (``dest.copy_(src)``).
        src: The tensor read; it must broadcast to ``dest``'s shape.

    Returns:
        0.

    Raises:
        RuntimeError: ``src`` does not broadcast to ``dest``'s shape (torch's ``copy_``).
    """
    dest.copy_(src)
    return 0


class AsyncIOKernels(DeepSpeedModule):
    """The module object ``AsyncIOBuilder().load()`` returns."""

    aio_handle = aio_handle
    aio_read = staticmethod(aio_read)
    aio_write = staticmethod(aio_write)
    deepspeed_memcpy = staticmethod(deepspeed_memcpy)
