"""A reference engine for benchmarks/io.py: Linux AIO (what fio's libaio engine uses) on
the very same tensor memory, through the raw system calls (no libaio library needed).

fio moves data from its own buffers, iodepth x bs bytes rewritten over and over (8 MiB at
1 MiB x 8), which stay in the CPU caches; a tensor of 256 MiB to 1 GiB streams from
memory. Measured here with this loop: rewriting an 8 MiB buffer, 1 MiB blocks at depth 4,
wrote 5.57 GB/s; the full 256 MiB tensor 4.07 GB/s. This engine gives the kernel
interface's speed for the tensor itself, the like-for-like baseline for accel.io.
x86-64 Linux only (the system call numbers).
"""

from __future__ import annotations

import ctypes
import os
import platform
import time

import torch

_IO_SETUP, _IO_DESTROY, _IO_GETEVENTS, _IO_SUBMIT = 206, 207, 208, 209  # x86-64
_PREAD, _PWRITE = 0, 1  # IOCB_CMD_*


class _IOCB(ctypes.Structure):
    """``struct iocb`` (linux/aio_abi.h, little-endian)."""

    _fields_ = [
        ("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
        ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32),
    ]  # fmt: skip


class _Event(ctypes.Structure):
    """``struct io_event``."""

    _fields_ = [
        ("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64), ("res2", ctypes.c_int64),
    ]  # fmt: skip


def available() -> bool:
    """Whether this machine can run the reference engine."""
    return platform.system() == "Linux" and platform.machine() == "x86_64"


def _syscall(libc: ctypes.CDLL, *args: object) -> int:
    result = int(libc.syscall(*args))
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"AIO system call {args[0]} failed: {os.strerror(error)}")
    return result


def _transfer(path: str, buffer: torch.Tensor, block: int, depth: int, opcode: int) -> float:
    """Move all of ``buffer`` to or from ``path`` with ``depth`` blocks in flight; seconds."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    flags = (os.O_WRONLY if opcode == _PWRITE else os.O_RDONLY) | os.O_DIRECT
    fd = os.open(path, flags)
    context = ctypes.c_ulong(0)
    _syscall(libc, _IO_SETUP, depth, ctypes.byref(context))
    try:
        size = buffer.numel() * buffer.element_size()
        count = size // block
        iocbs = [_IOCB() for _ in range(depth)]
        pointer = (ctypes.POINTER(_IOCB) * 1)()
        events = (_Event * depth)()

        def submit(slot: int, index: int) -> None:
            iocb = iocbs[slot]
            iocb.data, iocb.opcode, iocb.fildes = slot, opcode, fd
            iocb.buf, iocb.nbytes = buffer.data_ptr() + index * block, block
            iocb.offset = index * block
            pointer[0] = ctypes.pointer(iocb)
            _syscall(libc, _IO_SUBMIT, context, 1, pointer)

        start = time.perf_counter()
        issued = in_flight = 0
        for slot in range(min(depth, count)):
            submit(slot, issued)
            issued, in_flight = issued + 1, in_flight + 1
        while in_flight:
            done = _syscall(libc, _IO_GETEVENTS, context, 1, depth, events, None)
            for event in events[:done]:
                if event.res != block:
                    raise OSError(f"AIO moved {event.res} of {block} bytes")
                in_flight -= 1
                if issued < count:
                    submit(int(event.data), issued)
                    issued, in_flight = issued + 1, in_flight + 1
        return time.perf_counter() - start
    finally:
        libc.syscall(_IO_DESTROY, context)
        os.close(fd)


def write_read(path: str, buffer: torch.Tensor, block: int, depth: int) -> tuple[float, float]:
    """Write then read ``buffer`` (aligned, a multiple of ``block`` bytes); GB/s each way."""
    nbytes = buffer.numel() * buffer.element_size()
    write = _transfer(path, buffer, block, depth, _PWRITE)
    read = _transfer(path, buffer, block, depth, _PREAD)
    return nbytes / write / 1e9, nbytes / read / 1e9
