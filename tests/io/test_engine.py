"""accel.io: round trips, O_DIRECT rules, and every failure a clear exception."""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.io import ALIGNMENT, AsyncIO, aligned_empty
from accel.ops.prebuilt import CPU_OP_BUILDERS, HOST_OP_BUILDERS

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int8,
    torch.int64,
    torch.bool,
    torch.uint8,
]


def _random(numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    raw = torch.randint(0, 256, (numel * torch.empty(0, dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))  # fmt: skip
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_leaks() -> object:
    fds, threads = _open_fds(), threading.active_count()
    yield None
    assert _open_fds() <= fds, "a file descriptor leaked"
    assert threading.active_count() <= threads, "a thread outlived its engine"


request_specs = st.lists(
    st.tuples(st.sampled_from(DTYPES), st.integers(0, 70_000), st.integers(0, 3), st.booleans()),
    min_size=1, max_size=6,
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(specs=request_specs, block=st.sampled_from([4096, 12288, 65536]), depth=st.integers(1, 8),
       direct=st.sampled_from([None, False]), seed=st.integers(0, 2**16))  # fmt: skip
def test_any_tensor_round_trips_bit_exactly_at_any_offset(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[tuple[torch.dtype, int, int, bool]],
    block: int, depth: int, direct: bool | None, seed: int,
) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("io") / "data.bin"
    tensors, offsets, position = [], [], 0
    for i, (dtype, numel, gap, aligned) in enumerate(specs):
        source = _random(numel, dtype, seed + i)
        if aligned:  # an O_DIRECT-eligible buffer and offset
            buffer = aligned_empty(numel, dtype)
            buffer.copy_(source)
            source = buffer
            position += -position % ALIGNMENT
        tensors.append(source)
        offsets.append(position)
        position += source.numel() * source.element_size() + gap * 1000
    with AsyncIO(block_size=block, queue_depth=depth, direct=direct) as aio:
        writes = [
            aio.write(t, path, o) for t, o in zip(tensors, offsets, strict=True)
        ]  # all in flight
        assert aio.wait() == len(tensors)
        assert [w.result() for w in writes] == [t.numel() * t.element_size() for t in tensors]
        copies = [
            aligned_empty(t.numel(), t.dtype) if i % 2 else torch.empty_like(t)
            for i, t in enumerate(tensors)
        ]
        reads = [aio.read(c, path, o) for c, o in zip(copies, offsets, strict=True)]
        aio.wait()
        assert all(r.done() for r in reads)
    for original, copy in zip(tensors, copies, strict=True):
        assert torch.equal(original.view(torch.uint8), copy.view(torch.uint8))


def test_direct_io_is_used_when_aligned_and_reported(
    tmp_path: pathlib.Path, no_leaks: object
) -> None:
    buffer = aligned_empty(3 * ALIGNMENT + 100, torch.uint8)  # unaligned length: buffered tail
    buffer.copy_(_random(buffer.numel(), torch.uint8, 1))
    with AsyncIO(block_size=ALIGNMENT) as aio:
        request = aio.write(buffer, tmp_path / "d.bin", offset=ALIGNMENT)
        assert request.result() == buffer.numel()
        assert request.direct is True
        unaligned = aio.write(buffer[1:], tmp_path / "d.bin", offset=ALIGNMENT + 1)
        unaligned.result()
        assert unaligned.direct is False
        back = torch.empty_like(buffer)
        aio.read(back, tmp_path / "d.bin", offset=ALIGNMENT).result()
    assert torch.equal(back[1:], buffer[1:])


def test_file_system_without_o_direct_falls_back_or_refuses(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leaks: object
) -> None:
    # Linux 6.6+ tmpfs accepts O_DIRECT, so the refusal older kernels and some network
    # file systems give (EINVAL at open) is simulated.
    real_open = os.open

    def refusing_open(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing_open)
    buffer = aligned_empty(ALIGNMENT, torch.uint8)
    with AsyncIO() as aio:
        request = aio.write(buffer, tmp_path / "x.bin")
        assert request.result() == ALIGNMENT
        assert request.direct is False  # buffered, and says so
    with (
        AsyncIO(direct=True) as aio,
        pytest.raises(OSError, match=r"cannot open .*x\.bin.* with O_DIRECT"),
    ):
        aio.write(buffer, tmp_path / "x.bin")


def test_misaligned_buffer_under_required_o_direct_names_the_file(tmp_path: pathlib.Path) -> None:
    buffer = aligned_empty(2 * ALIGNMENT, torch.uint8)[1:]
    with (
        AsyncIO(direct=True) as aio,
        pytest.raises(ValueError, match=r"O_DIRECT write of .*x\.bin.*aligned"),
    ):
        aio.write(buffer, tmp_path / "x.bin")


def test_missing_directory_names_the_file(tmp_path: pathlib.Path, no_leaks: object) -> None:
    with (
        AsyncIO() as aio,
        pytest.raises(FileNotFoundError, match=r"cannot open .*nowhere/x\.bin.* for write"),
    ):
        aio.write(torch.ones(4), tmp_path / "nowhere" / "x.bin")


def test_read_past_end_of_file_is_an_eof_error(tmp_path: pathlib.Path, no_leaks: object) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(b"\0" * 100)
    with (
        AsyncIO() as aio,
        pytest.raises(
            EOFError,
            match=r"short\.bin: reading 400 bytes at offset 8 needs 408 bytes, the file has 100",
        ),
    ):
        aio.read(torch.empty(100), path, offset=8)


@pytest.mark.parametrize(
    ("tensor", "error", "message"),
    [
        (torch.ones(4, 4).t(), ValueError, "contiguous"),
        (torch.ones(4, device="meta"), ValueError, "must be on the CPU"),
        ([1, 2, 3], TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_tensors_are_rejected(
    tmp_path: pathlib.Path, tensor: object, error: type[Exception], message: str
) -> None:
    with AsyncIO() as aio, pytest.raises(error, match=message):
        aio.write(tensor, tmp_path / "x.bin")  # type: ignore[arg-type]


def _shrunk(numel: int, start: int = 0) -> torch.Tensor:
    tensor = torch.zeros(numel, dtype=torch.uint8)[start:]
    tensor.untyped_storage().resize_(64)  # as FSDP and ZeRO-3 free a parameter's memory
    return tensor


@pytest.mark.parametrize("kind", ["read", "write"])
def test_a_tensor_past_its_storages_end_is_rejected(tmp_path: pathlib.Path, kind: str) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(1 << 20))
    for tensor in (_shrunk(1 << 20), _shrunk(128, start=32)):
        with AsyncIO() as aio, pytest.raises(ValueError, match="which holds 64 bytes"):
            getattr(aio, kind)(tensor, path)
    assert path.read_bytes() == bytes(1 << 20)
    with AsyncIO() as aio:  # within the storage: fine
        assert aio.read(_shrunk(64), path).result() == 64


def test_done_callbacks_see_their_request_finished_and_may_not_wait(
    tmp_path: pathlib.Path, no_leaks: object
) -> None:
    seen: list[tuple[str, int, str]] = []
    with AsyncIO(queue_depth=2) as aio:
        for _ in range(10):  # until a callback runs on the engine's thread, not ours
            request = aio.write(torch.ones(16 << 20, dtype=torch.uint8), tmp_path / "x.bin")

            def done(_: object, aio: AsyncIO = aio) -> None:
                said = ""
                try:
                    # An empty request ends inside submit, in this thread: not the end of
                    # this callback.
                    aio.write(torch.empty(0), tmp_path / "y.bin").result()
                    aio.wait()
                except RuntimeError as error:
                    said = str(error)
                seen.append((threading.current_thread().name, aio.pending(), said))

            request.add_done_callback(done)
            assert request.result() == 16 << 20
            # result() returns once the request ends, which may be before its callbacks ran
            # on the engine's thread (as with concurrent.futures); wait() waits for them too.
            aio.wait()
            assert aio.pending() == 0
            if seen and seen[-1][0].startswith("accel-io"):
                break
        assert aio.wait() >= 0  # the engine goes on
    thread, pending, said = seen[-1]
    assert thread.startswith("accel-io"), seen
    assert pending == 0
    assert "AsyncIO.wait() called from a request's done-callback" in said


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"block_size": 0}, "block_size must be a positive number of bytes, got 0"),
     ({"block_size": True}, "block_size must be a positive number of bytes, got True"),
     ({"block_size": 4096.0}, "block_size must be a positive number of bytes, got 4096.0"),
     ({"queue_depth": 0}, r"queue_depth must be an integer in \[1, 256\]"),
     ({"queue_depth": True}, r"queue_depth must be an integer in \[1, 256\], got True"),
     ({"direct": "yes"}, "direct must be None"),
     ({"direct": 1}, "direct must be None")],
)  # fmt: skip
def test_bad_engine_settings_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AsyncIO(**kwargs)  # type: ignore[arg-type]


def test_an_offset_past_the_largest_file_offset_names_the_file(tmp_path: pathlib.Path) -> None:
    with (
        AsyncIO() as aio,
        pytest.raises(
            ValueError, match=r"write of 16 bytes at offset 9223372036854775800 of .*x\.bin"
        ),
    ):
        aio.write(torch.ones(4), tmp_path / "x.bin", offset=2**63 - 8)


def test_negative_offset_is_rejected(tmp_path: pathlib.Path) -> None:
    with (
        AsyncIO() as aio,
        pytest.raises(ValueError, match="offset must be an integer >= 0, got -1"),
    ):
        aio.write(torch.ones(1), tmp_path / "x.bin", offset=-1)


def test_closed_engine_refuses_work(tmp_path: pathlib.Path, no_leaks: object) -> None:
    aio = AsyncIO()
    aio.close()
    aio.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        aio.write(torch.ones(1), tmp_path / "x.bin")
    with pytest.raises(RuntimeError, match="closed"):
        aio.wait()


def _run(code: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.slow  # starts an interpreter
def test_full_disk_fails_the_write_and_names_the_file(tmp_path: pathlib.Path) -> None:
    # A file-size limit makes the kernel refuse writes past 64 KiB, as a full disk would.
    result = _run(
        """
        import os, resource, signal, torch
        from accel.io import AsyncIO
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        fds = len(os.listdir("/proc/self/fd"))
        with AsyncIO(block_size=16384) as aio:
            request = aio.write(torch.ones(1 << 16), "big.bin")
            try:
                aio.wait()
            except OSError as error:
                print("ERROR", error)
            assert request.exception() is not None, "a failed write was reported as done"
        assert len(os.listdir("/proc/self/fd")) == fds, "descriptor leaked"
    """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR" in result.stdout
    assert "big.bin: write of" in result.stdout
    assert "File too large" in result.stdout


@pytest.mark.slow  # starts an interpreter
def test_fork_with_requests_in_flight(tmp_path: pathlib.Path) -> None:
    result = _run(
        """
        import os, torch
        from accel.io import AsyncIO, aligned_empty
        aio = AsyncIO(block_size=1 << 20, queue_depth=2)
        data = aligned_empty(64 << 20, torch.uint8)
        request = aio.write(data, "f.bin")
        pid = os.fork()
        if pid == 0:
            try:
                aio.write(data, "g.bin")
            except RuntimeError as error:
                os._exit(0 if "after fork" in str(error) else 3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert aio.wait() == 1 and request.result() == 64 << 20
        aio.close()
        print("OK")
    """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


def test_aligned_empty(no_leaks: object) -> None:
    for alignment in (64, 4096, 1 << 16):
        tensor = aligned_empty((3, 5), torch.float64, alignment=alignment)
        assert tensor.shape == (3, 5)
        assert tensor.dtype == torch.float64
        assert tensor.data_ptr() % alignment == 0
    assert aligned_empty(7, torch.int8, pin_memory=True).data_ptr() % ALIGNMENT == 0
    with pytest.raises(ValueError, match="power of two"):
        aligned_empty(4, alignment=3000)
    with pytest.raises(ValueError, match="non-negative"):
        aligned_empty((-1,))
    # Each gave a bare Python or torch error ("'float' object is not iterable"), or took a
    # bool for an int.
    bad: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"shape": 2.0}, ValueError, "shape must be an int or a sequence of them, got 2.0"),
        ({"shape": "ab"}, ValueError, "shape must be an int or a sequence of them, got 'ab'"),
        ({"shape": True}, ValueError, "shape must be non-negative integers, got True"),
        ({"shape": (2, True)}, ValueError, r"shape must be non-negative integers, got \(2, True\)"),
        ({"shape": 4, "alignment": True}, ValueError, "alignment must be a power of two, got True"),
        ({"shape": 4, "pin_memory": "no"}, TypeError, "pin_memory must be True or False, got 'no'"),
    ]
    for kwargs, error, message in bad:
        with pytest.raises(error, match=message):
            aligned_empty(**kwargs)  # type: ignore[arg-type]


def test_builders_list_async_io_on_every_backend() -> None:
    builder = CPU_OP_BUILDERS["AsyncIOBuilder"]()
    assert builder.is_compatible()
    module = builder.load()
    assert module.AsyncIO is AsyncIO
    assert HOST_OP_BUILDERS["AsyncIOBuilder"] is CPU_OP_BUILDERS["AsyncIOBuilder"]
    ccl = CPU_OP_BUILDERS["CCLCommBuilder"]()
    assert not ccl.is_compatible()  # oneCCL's bindings are not installed here
    assert "oneccl_bindings_for_pytorch" in (ccl.incompatibility_reason() or "")
    with pytest.raises(RuntimeError, match="cannot load ccl_comm"):
        ccl.load()
    assert CPU_OP_BUILDERS["FusedLionBuilder"]().load().lion_step is not None


def test_cuda_backend_reports_async_io_without_a_gpu() -> None:
    from accel.backends.cuda import CUDAAccelerator
    from accel.protocols import OpBuilderAPI

    assert issubclass(CUDAAccelerator, OpBuilderAPI)
    assert CUDAAccelerator.op_builders == HOST_OP_BUILDERS


@pytest.mark.slow  # starts an interpreter
def test_a_write_from_an_atexit_handler_completes_and_exit_does_not_hang(
    tmp_path: pathlib.Path,
) -> None:
    # At exit the thread pool takes no new work; the engine used to register the transfer
    # before the pool refused its blocks, so close() then waited forever.
    script = tmp_path / "save_at_exit.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import atexit, torch
            from accel.io import AsyncIO
            engine = AsyncIO()  # made early, as a checkpointing library would
            path = {str(tmp_path / "checkpoint.bin")!r}

            def save():
                tensor = torch.arange(1 << 20, dtype=torch.int32)
                try:
                    print("written", engine.write(tensor, path).result(), flush=True)
                finally:
                    engine.close()
                back = torch.empty_like(tensor)
                with AsyncIO() as late:
                    late.read(back, path).result()
                print("equal", bool(torch.equal(back, tensor)), flush=True)

            atexit.register(save)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["written", str(4 << 20), "equal", "True"]


def test_an_append_mode_descriptor_is_refused_for_writes(tmp_path: pathlib.Path) -> None:
    # The kernel puts every write to an O_APPEND descriptor at the end of the file: a
    # positional write there used to report success and scramble the data.
    path = tmp_path / "appended.bin"
    path.write_bytes(b"\0" * 16)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with (
            AsyncIO() as engine,
            pytest.raises(ValueError, match=rf"file descriptor {fd} was opened with O_APPEND"),
        ):
            engine.write(torch.ones(4), fd, offset=0)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0" * 16  # nothing was written
    with AsyncIO() as engine, pytest.raises(OSError, match=f"file descriptor {fd} is not open"):
        engine.write(torch.ones(4), fd)


def test_new_files_are_readable_by_their_owner_only(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "swap.bin"
    with AsyncIO() as engine:
        engine.write(torch.ones(1024), path).result()
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o640)  # an existing file keeps the mode it has
    with AsyncIO() as engine:
        engine.write(torch.ones(1024), path).result()
    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.slow  # starts an interpreter
def test_freeing_a_storage_waits_for_the_reads_into_it(tmp_path: pathlib.Path) -> None:
    # FSDP and ZeRO-3 free parameters with untyped_storage().resize_(0). Done while a read
    # was filling the tensor, the kernel wrote into freed memory: heap corruption
    # ("malloc(): invalid size", SIGSEGV) or EFAULT. In a child process: it may crash.
    script = tmp_path / "free_mid_read.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, threading, torch
            from accel.io import AsyncIO
            path = {str(tmp_path / "data.bin")!r}
            moved, lock, real_preadv = [0], threading.Lock(), os.preadv

            def counted_preadv(*args):
                done = real_preadv(*args)
                with lock:
                    moved[0] += done
                return done

            os.preadv = counted_preadv
            with AsyncIO(block_size=1 << 16) as engine:
                engine.write(torch.arange(1 << 20, dtype=torch.int32), path).result()
            for n in (1 << 14, 1 << 16, 1 << 18, 1 << 20) * 3:
                with AsyncIO(block_size=1 << 16, queue_depth=8) as engine:
                    tensor = torch.empty(n, dtype=torch.int32)
                    moved[0] = 0
                    request = engine.read(tensor, path)
                    tensor.untyped_storage().resize_(0)
                    # resize_ waited for the read's system calls (the request itself ends
                    # a moment later, once its memory is given back).
                    assert moved[0] == 4 * n, "the storage was freed while the read ran"
                    assert request.result() == 4 * n
                    assert tensor.untyped_storage().nbytes() == 0
                churn = [torch.ones(1 << k, dtype=torch.uint8) for k in range(4, 22)]
            print("survived", flush=True)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "survived"


def test_wait_counts_and_raises_only_what_the_caller_did_not_take(tmp_path: pathlib.Path) -> None:
    # wait() counted requests already waited for with result() (DeepSpeed's tests assert
    # wait() == the asynchronous requests) and raised errors result() had delivered.
    with AsyncIO() as engine:
        engine.write(torch.ones(4), tmp_path / "sync.bin").result()
        with pytest.raises(OSError, match="the file ended"):  # fails in the transfer
            engine.read(torch.empty(1 << 24, dtype=torch.uint8), "/proc/self/status").result()
        engine.write(torch.ones(4), tmp_path / "a.bin")
        engine.write(torch.ones(4), tmp_path / "b.bin")
        assert engine.wait() == 2
        assert engine.wait() == 0


def test_lazy_views_and_fifos_are_refused(tmp_path: pathlib.Path) -> None:
    # A conj()/neg view's memory holds the unconjugated values, which were written as
    # they were; a FIFO blocked the caller in open() until a reader came.
    values = torch.tensor([1 + 2j, 3 - 4j])
    with AsyncIO() as engine:
        for view in (values.conj(), torch.ones(2)._neg_view()):
            with pytest.raises(ValueError, match="tensor is a lazy negative or conjugate view"):
                engine.write(view, tmp_path / "view.bin")
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        with pytest.raises(ValueError, match="is a FIFO or socket"):
            engine.write(torch.ones(2), fifo)
        engine.write(values.conj().resolve_conj(), tmp_path / "resolved.bin").result()


@pytest.mark.parametrize("block_size", [1, 1000, 1024, 4096 + 512, 3 << 20])
def test_any_block_size_moves_every_byte_at_any_offset(
    tmp_path: pathlib.Path, block_size: int
) -> None:
    # DeepSpeed's callers pass block sizes such as 1024; alignment is the engine's business.
    data = torch.randint(0, 256, (3 * 4096 + 777,), dtype=torch.uint8)
    path = tmp_path / "blocks.bin"
    with AsyncIO(block_size=block_size, queue_depth=4) as aio:
        assert aio.block_size == block_size
        aio.write(data, path, offset=1024).result()
        back = torch.empty_like(data)
        aio.read(back, path, offset=1024).result()
    assert torch.equal(back, data)
    assert path.stat().st_size == 1024 + data.numel()


def test_an_o_direct_descriptor_takes_unaligned_requests(tmp_path: pathlib.Path) -> None:
    # A caller's O_DIRECT descriptor is kept for what O_DIRECT can take; an unaligned
    # buffer, offset or tail goes through a second descriptor without O_DIRECT.
    path = tmp_path / "direct.bin"
    try:
        fd = os.open(path, os.O_DIRECT | os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError as error:  # a file system without O_DIRECT (old tmpfs)
        pytest.skip(f"O_DIRECT is not supported under {tmp_path}: {error}")
    data = aligned_empty(4 * 4096, torch.uint8)
    data.copy_(torch.randint(0, 256, data.shape, dtype=torch.uint8))
    pieces = [(0, 4096), (4096, 1024), (5120, 3072 + 4096), (12288, 4096)]
    try:
        with AsyncIO(block_size=1024) as aio:
            for start, length in pieces:
                aio.write(data[start : start + length], fd, offset=start).result()
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT, "the caller's flags changed"
    finally:
        os.close(fd)
    assert path.read_bytes() == data.numpy().tobytes()


def _finishes(call: object, seconds: float = 30) -> bool:
    """Whether ``call()`` returns (or raises) within ``seconds``, run on a daemon thread."""
    thread = threading.Thread(target=call, daemon=True)  # type: ignore[arg-type]
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_an_interrupted_submission_ends_its_request(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C between two queued blocks left the request in flight for ever: wait() and
    # close() hung, and the storage stayed unresizable, its resize_ waiting for ever.
    aio = AsyncIO(queue_depth=2, block_size=4096)
    tensor = torch.zeros(1 << 20, dtype=torch.uint8)
    real, calls = aio._pool.submit, [0]

    def submit(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 100:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(aio._pool, "submit", submit)
    with pytest.raises(KeyboardInterrupt):
        aio.write(tensor, tmp_path / "x.bin")
    monkeypatch.setattr(aio._pool, "submit", real)
    failures: list[BaseException] = []

    def wait() -> None:
        try:
            aio.wait()
        except RuntimeError as error:
            failures.append(error)

    assert _finishes(wait)
    assert "was interrupted while it was submitted (KeyboardInterrupt)" in str(failures[0])
    assert aio.pending() == 0
    assert _finishes(lambda: tensor.untyped_storage().resize_(0))
    assert _finishes(aio.close)


def test_a_poll_that_timed_out_leaves_the_failure_to_wait(tmp_path: pathlib.Path) -> None:
    # result(timeout=...) marked the request as taken before it waited: when the poll timed
    # out, wait() later neither counted nor raised the request's failure.
    with AsyncIO(queue_depth=1) as aio:
        gate = threading.Event()
        aio._pool.submit(gate.wait, 30)  # the engine's one thread is busy until the gate
        try:
            # Fails as it runs: the file ends before the tensor is full.
            request = aio.read(torch.empty(1 << 24, dtype=torch.uint8), "/proc/self/status")
            with pytest.raises(TimeoutError):
                request.result(timeout=0.01)
            gate.set()
            with pytest.raises(OSError, match="the file ended"):
                aio.wait()
        finally:
            gate.set()


def test_requests_taken_with_result_are_not_kept(tmp_path: pathlib.Path) -> None:
    # Every request stayed in the engine until a wait() that a caller using result() alone
    # never makes (a failed one kept its storage alive through its error).
    import gc
    import weakref

    with AsyncIO() as aio:
        requests = []
        for _ in range(500):
            request = aio.write(torch.ones(16, dtype=torch.uint8), tmp_path / "x.bin")
            assert request.result() == 16
            requests.append(weakref.ref(request))
        del request
        gc.collect()
        kept = sum(ref() is not None for ref in requests)
        assert kept < 200, kept


def test_a_bool_is_no_file_descriptor(tmp_path: pathlib.Path) -> None:
    # aio.write(t, True) wrote to standard output (descriptor 1).
    with AsyncIO() as aio, pytest.raises(TypeError, match="got bool True"):
        aio.write(torch.ones(4, dtype=torch.uint8), True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "message"),
    [("x\0y", r"path 'x\\x00y' holds a NUL character"),
     (b"x\0y", r"path b'x\\x00y' holds a NUL character"),
     (-1, r"file descriptor must be an int in \[0, 2\*\*31\), got -1"),
     (2**40, r"file descriptor must be an int in \[0, 2\*\*31\), got 1099511627776")],
)  # fmt: skip
def test_impossible_paths_and_descriptors_are_named(path: object, message: str) -> None:
    # Python's own errors named neither ("embedded null byte", "Python int too large to
    # convert to C int").
    with AsyncIO() as aio, pytest.raises(ValueError, match=message):
        aio.write(torch.ones(4, dtype=torch.uint8), path)  # type: ignore[arg-type]


@pytest.mark.slow  # starts an interpreter, which forks a hundred times
def test_children_forked_as_requests_end_keep_their_descriptors(tmp_path: pathlib.Path) -> None:
    # A request's descriptors were closed before it left the engine's set: a child forked
    # in between closed those numbers again, which the parent may have reused (the child's
    # own pipe here), or failed in the fork hook and left storages unresizable (resize_ hung).
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(1 << 20))
    result = _run(
        f"""
        import os, signal, threading, torch
        from accel.io import AsyncIO
        aio = AsyncIO(queue_depth=2, block_size=4096)
        x = torch.zeros(8192, dtype=torch.uint8)
        stop = False

        def pump():
            while not stop:
                for _ in range(20):
                    aio.read(x, {str(path)!r})
                aio.wait()

        thread = threading.Thread(target=pump)
        thread.start()
        bad = []
        for _ in range(100):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.fstat(r)
                except OSError:
                    os._exit(3)
                signal.alarm(10)
                x.untyped_storage().resize_(8192)
                os._exit(0)
            os.close(r)
            os.close(w)
            status = os.waitpid(pid, 0)[1]
            if os.waitstatus_to_exitcode(status) != 0:
                bad.append(os.waitstatus_to_exitcode(status))
        stop = True
        thread.join()
        aio.close()
        print("bad children:", bad)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "bad children: []", result.stderr[-3000:]


def test_a_read_into_an_inference_tensor_is_refused_as_torch_refuses_it(
    tmp_path: pathlib.Path,
) -> None:
    # Accepted, the read updated in place a tensor torch refuses to update outside
    # inference_mode().
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(16))
    with torch.inference_mode():
        frozen = torch.ones(16, dtype=torch.uint8)
    with AsyncIO() as aio:
        with pytest.raises(ValueError, match="tensor is an inference tensor"):
            aio.read(frozen, path)
        assert torch.equal(frozen, torch.ones(16, dtype=torch.uint8))
        assert aio.write(frozen, path).result() == 16  # reading it is fine
        with torch.inference_mode():
            assert aio.read(frozen, path).result() == 16


def test_files_whose_size_says_nothing_are_read_as_far_as_they_go() -> None:
    # /dev/zero and /proc files report size 0: every read of them was refused at submission
    # ("the file has 0"), where os.pread reads them.
    with AsyncIO() as aio:
        zeros = torch.ones(4096, dtype=torch.uint8)
        assert aio.read(zeros, "/dev/zero").result() == 4096
        assert int(zeros.sum()) == 0
        status = torch.empty(5, dtype=torch.uint8)
        assert aio.read(status, "/proc/self/status").result() == 5
        assert bytes(status.tolist()) == b"Name:"
        with pytest.raises(OSError, match="the file ended"):  # past its end: as it runs
            aio.read(torch.empty(1 << 24, dtype=torch.uint8), "/proc/self/status").result()


@pytest.mark.parametrize("kind", ["read", "write"])
def test_a_pipe_descriptor_is_refused_at_submission(kind: str) -> None:
    # A write through one failed only later, from result() (ESPIPE); a read said "the file
    # has 0".
    r, w = os.pipe()
    try:
        with AsyncIO() as aio, pytest.raises(ValueError, match="is a pipe or socket"):
            getattr(aio, kind)(torch.ones(4, dtype=torch.uint8), w if kind == "write" else r)
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.slow  # starts an interpreter: memory freed under a read may crash it
def test_a_storage_freed_while_a_request_is_submitted_is_never_used(tmp_path: pathlib.Path) -> None:
    # The engine read the tensor's address, then ran the path's __fspath__ (the caller's
    # code) and opened the file (other threads run meanwhile) before it held the storage:
    # freed in between, the read landed in memory given to another tensor.
    result = _run(
        f"""
        import os, torch
        from accel.io import AsyncIO, _lifetime
        path, n = {str(tmp_path / "src.bin")!r}, 4096  # 16 KiB: malloc reuses it at once
        with AsyncIO() as aio:
            aio.write(torch.full((n,), 7.0), path).result()
        others = []

        class FreeingPath(os.PathLike):
            def __init__(self, tensor):
                self.tensor = tensor

            def __fspath__(self):
                self.tensor.untyped_storage().resize_(0)
                others.append(torch.zeros(n))  # may take the freed memory
                return path

        def read(tensor, target):
            with AsyncIO() as aio:
                try:
                    print("accepted", aio.read(tensor, target).result(), flush=True)
                except (ValueError, RuntimeError) as error:
                    print("refused", type(error).__name__, error, flush=True)

        read(torch.zeros(n), FreeingPath(torch.zeros(1)))  # warm-up: another tensor's path
        tensor = torch.zeros(n)
        read(tensor, FreeingPath(tensor))
        # Another thread freeing the storage just before the hold: stood in for by the
        # hold's first step.
        real_hold = _lifetime.hold

        def hold_after_free(storage, *args):
            storage.resize_(0)
            others.append(torch.zeros(n))
            return real_hold(storage, *args)

        _lifetime.hold = hold_after_free
        read(torch.zeros(n), path)
        _lifetime.hold = real_hold
        print("others untouched", all(bool((o == 0).all()) for o in others), flush=True)
        """,
        tmp_path,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr[-3000:]
    assert lines[0] == "accepted 16384"
    assert lines[1].startswith("refused ValueError tensor reaches byte 16384 of its storage, "
                               "which holds 0 bytes"), lines  # fmt: skip
    assert lines[2].startswith("refused RuntimeError read of "), lines
    assert "the tensor's memory changed while the request was submitted" in lines[2]
    assert lines[3] == "others untouched True", lines


def test_a_block_runs_once_when_the_pool_cannot_start_a_thread(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leaks: object
) -> None:
    # ThreadPoolExecutor.submit queues the work and then raises "can't start new thread" (a
    # pids limit, memory). The engine ran the block itself as well, and the queued copy ran
    # again once a thread started, through the request's closed descriptor number, reused
    # by then for another file.
    data = _random(3 * ALIGNMENT + 100, torch.uint8, 5)
    target, other = tmp_path / "target.bin", tmp_path / "other.bin"
    writes: list[tuple[str, int]] = []  # (the file written, offset), as each write ran
    real_pwrite, real_start = os.pwrite, threading.Thread.start

    def recorded_pwrite(fd: int, data: bytes, offset: int) -> int:
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            name = "a closed descriptor"
        writes.append((name, offset))
        return real_pwrite(fd, data, offset)

    def failing_start(thread: threading.Thread) -> None:
        if thread.name.startswith("accel-io"):
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(os, "pwrite", recorded_pwrite)
    aio = AsyncIO(block_size=ALIGNMENT, queue_depth=2, direct=False)
    fd = None
    try:
        monkeypatch.setattr(threading.Thread, "start", failing_start)
        request = aio.write(data, target)
        monkeypatch.setattr(threading.Thread, "start", real_start)
        assert request.done()  # moved by the caller's thread
        assert aio.wait() == 1
        assert request.result() == data.numel()
        fd = os.open(other, os.O_WRONLY | os.O_CREAT, 0o600)  # the number the request freed
        os.write(fd, b"precious")
        # Threads start now, and take what the pool queued before.
        later = aio.write(torch.ones(16, dtype=torch.uint8), tmp_path / "later.bin")
        assert later.result(timeout=30) == 16
    finally:
        aio.close()  # its threads take every queued item first
        if fd is not None:
            os.close(fd)
    assert other.read_bytes() == b"precious"
    assert target.read_bytes() == data.numpy().tobytes()
    expected = [("target.bin", start) for start in range(0, data.numel(), ALIGNMENT)]
    assert sorted(writes) == sorted([*expected, ("later.bin", 0)])
    assert aio.pending() == 0


def _fail_closing(path: pathlib.Path, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.close`` of a descriptor of ``path`` closes it, then fails with EIO (as NFS does)."""
    where, real_close = os.path.realpath(path), os.close

    def failing_close(fd: int) -> None:
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        real_close(fd)  # closed, as Linux does, and then the error
        if name == where:
            raise OSError(errno.EIO, message)

    monkeypatch.setattr(os, "close", failing_close)


@pytest.mark.parametrize("kind", ["read", "write"])
def test_a_failing_close_fails_the_request_and_gives_the_tensor_back(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # close(2) reports a write-back error on NFS. It escaped the engine's thread before the
    # request ended: result() and wait() waited for ever, and so did the tensor's resize_.
    path = tmp_path / "nfs.bin"
    path.write_bytes(bytes(1 << 16))
    where = os.path.realpath(path)
    tensor = torch.ones(1 << 16, dtype=torch.uint8)
    aio = AsyncIO(block_size=ALIGNMENT)
    _fail_closing(path, "Input/output error", monkeypatch)
    request = getattr(aio, kind)(tensor, path)
    error = request.exception(timeout=10)
    monkeypatch.undo()
    assert isinstance(error, OSError), error
    assert error.errno == errno.EIO
    assert (f"{path}: closing the file after the {kind} of 65536 bytes at offset 0 failed: "
            "Input/output error") in str(error)  # fmt: skip
    assert ("may not have reached the file" in str(error)) == (kind == "write")
    assert aio.pending() == 0
    assert _finishes(lambda: tensor.untyped_storage().resize_(0))
    assert _finishes(aio.close)
    assert not any(os.path.realpath(f"/proc/self/fd/{fd}") == where for fd in _open_fds())


def test_close_raises_the_first_failure_nobody_took() -> None:
    # A request failing inside `with AsyncIO() as aio:` left the block as if all went well:
    # without a wait(), nobody heard of it.
    def failing(aio: AsyncIO) -> object:  # fails as it runs: the file ends first
        return aio.read(torch.empty(1 << 24, dtype=torch.uint8), "/proc/self/status")

    with pytest.raises(OSError, match="the file ended"), AsyncIO() as aio:
        failing(aio)
    aio.close()  # closed: nothing to raise again
    engine = AsyncIO()
    failing(engine)
    with pytest.raises(OSError, match="the file ended"):
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):  # and it is closed all the same
        engine.wait()
    with AsyncIO() as aio:  # taken by exception() or raised by wait(): not raised again
        assert isinstance(failing(aio).exception(), OSError)  # type: ignore[attr-defined]
        failing(aio)
        with pytest.raises(OSError, match="the file ended"):
            aio.wait()

    def own_failure() -> None:
        with AsyncIO() as aio:
            failing(aio)
            raise KeyError("the block's own")

    with pytest.raises(KeyError, match="the block's own") as raised:  # that one goes on
        own_failure()
    if sys.version_info >= (3, 11):  # the failure rides along
        notes = raised.value.__notes__
        assert any("accel.io: a request also failed: OSError" in note for note in notes)


def test_a_directory_is_refused_at_submission(tmp_path: pathlib.Path, no_leaks: object) -> None:
    # A read of a directory opened fine and failed only in result() (EISDIR from preadv).
    tensor = torch.empty(16, dtype=torch.uint8)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with AsyncIO() as aio:
            with pytest.raises(IsADirectoryError, match=f"cannot read '{tmp_path}': it is a "):
                aio.read(tensor, tmp_path)
            with pytest.raises(IsADirectoryError, match=f"file descriptor {fd} is a directory"):
                aio.read(tensor, fd)
            with pytest.raises(IsADirectoryError, match=f"cannot open '{tmp_path}' for write"):
                aio.write(tensor, tmp_path)
            assert aio.pending() == 0
    finally:
        os.close(fd)


def test_a_failing_close_after_a_failed_transfer_rides_on_its_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The transfer's own failure wins; the close failure that followed it was dropped.
    path = tmp_path / "nfs.bin"
    path.write_bytes(bytes(1 << 16))

    def failing_read(*args: object) -> int:
        raise OSError(errno.EIO, "read failed")

    aio = AsyncIO()
    monkeypatch.setattr(os, "preadv", failing_read)
    _fail_closing(path, "close failed", monkeypatch)
    error = aio.read(torch.empty(1 << 16, dtype=torch.uint8), path).exception(timeout=10)
    monkeypatch.undo()
    aio.close()
    assert isinstance(error, OSError), error
    assert "read failed" in str(error)
    if sys.version_info >= (3, 11):
        assert any("then closing the file failed too" in note and "close failed" in note
                   for note in error.__notes__)  # fmt: skip


def test_an_engine_dropped_unclosed_logs_the_failures_nobody_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # DeepSpeed's aio handle is never closed: its last failures went nowhere.
    def dropped(take: bool) -> None:
        engine = AsyncIO()
        request = engine.read(torch.empty(1 << 24, dtype=torch.uint8), "/proc/self/status")
        if take:
            assert isinstance(request.exception(timeout=10), OSError)
        gone = weakref.ref(engine)
        del engine, request
        for _ in range(1000):  # its threads hold it until the request has ended
            gc.collect()
            if gone() is None:
                return
            threading.Event().wait(0.01)
        raise AssertionError("the engine was never collected")

    with caplog.at_level("ERROR", logger="accel"):
        dropped(take=True)
        assert not caplog.records  # taken by exception(): reported already
        dropped(take=False)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1, messages
    assert "dropped without close(), and this failure was never reported: OSError" in messages[0]
    assert "the file ended" in messages[0]


@pytest.mark.parametrize("direct", [True, False])
def test_direct_holds_for_descriptors(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    # direct=True took a descriptor opened without O_DIRECT and went through the page cache;
    # direct=False used a descriptor's O_DIRECT, which it never uses.
    path = tmp_path / "d.bin"
    data = aligned_empty(2 * ALIGNMENT, torch.uint8)
    data.fill_(7)
    plain = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with AsyncIO(direct=direct) as aio:
            if direct:
                with pytest.raises(
                    ValueError,
                    match=rf"file descriptor {plain} was opened without O_DIRECT, and this "
                    "engine has direct=True",
                ):
                    aio.write(data, plain)
            else:
                assert aio.write(data, plain).direct is False
    finally:
        os.close(plain)
    assert path.read_bytes() == (b"" if direct else data.numpy().tobytes())
    try:
        fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    except OSError as error:
        pytest.skip(f"O_DIRECT is not supported under {tmp_path}: {error}")
    used: list[bool] = []  # per system call: through an O_DIRECT descriptor?
    real_pwrite = os.pwrite

    def recorded_pwrite(fd: int, data: bytes, offset: int) -> int:
        used.append(bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", recorded_pwrite)
    try:
        with AsyncIO(direct=direct, block_size=ALIGNMENT) as aio:
            request = aio.write(data, fd)
            assert request.result() == 2 * ALIGNMENT
    finally:
        os.close(fd)
    assert request.direct is direct
    assert used == [direct, direct]


def test_a_request_without_an_aligned_part_opens_no_o_direct_descriptor(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request under 4096 bytes moves nothing with O_DIRECT: it said direct=True and
    # opened an O_DIRECT descriptor anyway; and that open passed O_CREAT with no mode.
    try:
        os.close(os.open(tmp_path / "probe", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
    except OSError as error:
        pytest.skip(f"O_DIRECT is not supported under {tmp_path}: {error}")
    opened: list[int] = []
    real_open = os.open

    def recorded_open(path: str, flags: int, mode: int = 0o777) -> int:
        opened.append(flags)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", recorded_open)
    with AsyncIO(direct=True) as aio:
        small = aio.write(aligned_empty(100, torch.uint8), tmp_path / "small.bin")
        assert small.result() == 100
        assert small.direct is False
        assert not [flags for flags in opened if flags & os.O_DIRECT]
        opened.clear()
        whole = aio.write(aligned_empty(ALIGNMENT + 100, torch.uint8), tmp_path / "whole.bin")
        assert whole.result() == ALIGNMENT + 100
        assert whole.direct is True
    direct_opens = [flags for flags in opened if flags & os.O_DIRECT]
    assert len(direct_opens) == 1
    assert not direct_opens[0] & os.O_CREAT


def test_a_file_replaced_between_the_two_opens_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leaks: object
) -> None:
    # The O_DIRECT descriptor is the path's second open: a file renamed over it in between
    # took the aligned part, the first file the tail.
    path, newcomer = tmp_path / "x.bin", tmp_path / "newcomer.bin"
    newcomer.write_bytes(b"new")
    try:
        os.close(os.open(newcomer, os.O_RDONLY | os.O_DIRECT))
    except OSError as error:  # no second open to replace the file before
        pytest.skip(f"O_DIRECT is not supported under {tmp_path}: {error}")
    real_open = os.open

    def replacing_open(name: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            os.replace(newcomer, path)
        return real_open(name, flags, mode)

    monkeypatch.setattr(os, "open", replacing_open)
    with (
        AsyncIO() as aio,
        pytest.raises(OSError, match=r"x\.bin' was replaced by another file while it was opened"),
    ):
        aio.write(aligned_empty(ALIGNMENT + 1, torch.uint8), path)
    assert path.read_bytes() == b"new"


@pytest.mark.parametrize("where", ["as the hold returns", "building the transfer"])
def test_ctrl_c_before_the_blocks_are_queued_gives_everything_back(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leaks: object, where: str
) -> None:
    # Ctrl-C between the hold and the code that undoes a failed submission left the storage
    # held for ever (not resizable; its resize_ waited for ever) and the descriptors open.
    from accel.io import _engine, _lifetime

    path = tmp_path / "x.bin"
    path.write_bytes(bytes(1 << 16))
    tensor = torch.zeros(1 << 16, dtype=torch.uint8)
    if where == "as the hold returns":
        real_hold = _lifetime.hold

        def interrupted_hold(*args: object) -> object:
            real_hold(*args)  # type: ignore[arg-type]
            raise KeyboardInterrupt

        monkeypatch.setattr(_lifetime, "hold", interrupted_hold)
    else:

        def interrupted(*args: object, **kwargs: object) -> object:
            raise KeyboardInterrupt

        monkeypatch.setattr(_engine, "_Transfer", interrupted)
    aio = AsyncIO()
    with pytest.raises(KeyboardInterrupt):
        aio.read(tensor, path)
    monkeypatch.undo()
    assert aio.pending() == 0
    assert tensor.untyped_storage().resizable()
    assert _finishes(lambda: tensor.untyped_storage().resize_(0))
    assert _finishes(aio.close)


@pytest.mark.parametrize(
    ("kind", "flags", "message"),
    [("write", os.O_RDONLY, "is opened read-only; a write needs it opened with O_WRONLY"),
     ("read", os.O_WRONLY, "is opened write-only; a read needs it opened with O_RDONLY"),
     ("read", getattr(os, "O_PATH", 0), "was opened with O_PATH")],
)  # fmt: skip
def test_a_descriptor_open_for_the_other_direction_is_refused(
    tmp_path: pathlib.Path, kind: str, flags: int, message: str
) -> None:
    # It was accepted, and the transfer failed later with a bare EBADF.
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(16))
    fd = os.open(path, flags)
    try:
        with AsyncIO() as aio, pytest.raises(ValueError, match=f"file descriptor {fd} {message}"):
            getattr(aio, kind)(torch.ones(16, dtype=torch.uint8), fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(16)


def test_an_offset_may_be_any_integer_type_but_a_bool(tmp_path: pathlib.Path) -> None:
    # A NumPy integer offset was refused ("must be an integer"), as accel's other integer
    # arguments take it.
    import numpy as np

    path = tmp_path / "x.bin"
    with AsyncIO() as aio:
        assert aio.write(torch.ones(4, dtype=torch.uint8), path, np.int64(8)).result() == 4  # type: ignore[arg-type]
        assert path.read_bytes() == bytes(8) + b"\1" * 4
        with pytest.raises(ValueError, match="offset must be an integer >= 0, got True"):
            aio.write(torch.ones(4, dtype=torch.uint8), path, True)
        with pytest.raises(ValueError, match=r"offset must be an integer >= 0, got 8\.0"):
            aio.write(torch.ones(4, dtype=torch.uint8), path, 8.0)  # type: ignore[arg-type]
