"""accel.io: memory freed under a transfer, by every route torch has, with the transfer held
in flight deterministically (its first system call waits on an event; no timing decides
whether the route runs during the transfer)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

# Run in a child, which may crash; the parts every case shares. ``hold(kind)`` makes the
# engine's next pread/pwrite wait until ``gate`` is set: the transfer is then in flight,
# with none of its bytes moved, until the test lets it go. ``MOVED`` counts the bytes the
# system calls moved since.
PRELUDE = """
import ctypes, os, sys, threading, torch
from accel.io import AsyncIO

# Every block from 64 KiB up gets its own mapping, unmapped when freed: memory freed under a
# transfer is then either gone (EFAULT) or the next allocation of its size (a probe).
assert ctypes.CDLL(None).mallopt(-3, 1 << 16) == 1  # M_MMAP_THRESHOLD
path = sys.argv[1]
n = 4 << 20
with AsyncIO() as engine:
    engine.write(torch.full((n,), 7, dtype=torch.uint8), path).result()
SEVENS = torch.full((n,), 7, dtype=torch.uint8)


MOVED = {"bytes": 0, "lock": threading.Lock()}


def hold(kind):
    name = "pwrite" if kind == "write" else "preadv"
    real, gate, entered = getattr(os, name), threading.Event(), threading.Event()
    MOVED["bytes"] = 0

    def held(*args):
        entered.set()
        gate.wait()
        moved = real(*args)
        with MOVED["lock"]:
            MOVED["bytes"] += moved
        return moved

    setattr(os, name, held)
    return gate, entered, lambda: setattr(os, name, real)


def whole(storage):
    # The storage's bytes as a tensor, whatever has become of the tensor that used it.
    return torch.empty(0, dtype=torch.uint8).set_(storage)
"""

CASE = """
def case(kind, name, expected, route):
    box = {"tensor": torch.full((n,), 7 if kind == "write" else 0, dtype=torch.uint8)}
    storage = None if name == "del" else box["tensor"].untyped_storage()
    gate, entered, unhold = hold(kind)
    outcome = {}

    def run_route():
        try:
            route(box)
        except RuntimeError as error:
            outcome["raised"] = str(error)
        # Every byte moved before the route returned (request.done() may still be False
        # then: the engine gives the memory back before it ends the request).
        outcome["ended first"] = MOVED["bytes"] == n
        tensor = box.get("tensor")
        if kind == "write" and tensor is not None:
            if tensor.untyped_storage().nbytes() >= tensor.numel():
                tensor.fill_(9)  # what the tensor holds now must not reach the file

    try:
        with AsyncIO(queue_depth=1) as engine:
            request = getattr(engine, kind)(box["tensor"], path)
            entered.wait()  # the first system call is held: nothing has moved yet
            helper = threading.Thread(target=run_route)
            helper.start()
            # A route that waits for the transfer still waits after 0.5 s; the others end
            # (within any time a busy machine needs) before the transfer is let go.
            helper.join(timeout=0.5 if expected == "waits" else 60)
            waited = helper.is_alive()
            # New allocations take the memory a route freed, if it freed any.
            probes = [torch.zeros(n, dtype=torch.uint8) for _ in range(3)]
            gate.set()
            helper.join()
            error = request.exception()
    finally:
        unhold()
    assert all(int(p.count_nonzero()) == 0 for p in probes), "the transfer used freed memory"
    if expected == "moved" and kind == "read":
        assert isinstance(error, RuntimeError) and "did not reach the tensor" in str(error), error
    else:
        assert error is None, f"the transfer failed: {error!r}"
    if kind == "write":
        with open(path, "rb") as file:
            assert file.read() == SEVENS.numpy().tobytes(), "the file got other bytes"
    if expected == "refused":
        assert "not resizable" in outcome.get("raised", ""), outcome
        assert not outcome["ended first"]
        if kind == "read":  # torch set the tensor's new size; the storage kept the bytes
            assert torch.equal(whole(storage)[:n], SEVENS)
        return
    assert "raised" not in outcome, outcome
    if expected == "waits":
        assert waited and outcome["ended first"], "the route did not wait for the transfer"
        tensor = box["tensor"]
        if kind == "read" and tensor.untyped_storage().nbytes():
            assert torch.equal(tensor[:n], SEVENS), "the read's bytes were not moved along"
    elif expected == "leaves" and kind == "read" and storage is not None:
        # The old storage got the bytes.
        assert torch.equal(whole(storage), SEVENS)
"""

ROUTES = {
    # C++ ops that grow the tensor's storage: refused while the transfer runs.
    "empty out=": ("refused", "torch.empty(2 * n, dtype=torch.uint8, out=box['tensor'])"),
    "add out=": (
        "refused",
        "torch.add(torch.ones(2 * n, dtype=torch.uint8), 1, out=box['tensor'])",
    ),
    "cat out=": (
        "refused",
        "torch.cat([torch.ones(n, dtype=torch.uint8)] * 2, out=box['tensor'])",
    ),
    "torch.resize_as_": (
        "refused",
        "torch.resize_as_(box['tensor'], torch.empty(2 * n, dtype=torch.uint8))",
    ),
    "aten.resize_": ("refused", "torch.ops.aten.resize_(box['tensor'], [2 * n])"),
    "set_ past the end": (
        "refused",
        "box['tensor'].set_(box['tensor'].untyped_storage(), 0, (2 * n,), (1,))",
    ),
    # Python methods that would free the memory in place: they wait for the transfer.
    "Tensor.resize_": ("waits", "box['tensor'].resize_(2 * n)"),
    "Tensor.resize_as_": (
        "waits",
        "box['tensor'].resize_as_(torch.empty(2 * n, dtype=torch.uint8))",
    ),
    "UntypedStorage.resize_": ("waits", "box['tensor'].untyped_storage().resize_(0)"),
    "share_memory_": ("waits", "box['tensor'].share_memory_()"),
    "_share_filename_cpu_": ("waits", "box['tensor'].untyped_storage()._share_filename_cpu_()"),
    # Swapped with another storage's memory, which the tensor then takes along.
    "_swap_data_ptr_": (
        "waits",
        "(lambda other: (box['tensor'].untyped_storage()._swap_data_ptr_("
        "other.untyped_storage()), box.update(tensor=other)))("
        "torch.full((n,), 3, dtype=torch.uint8))",
    ),
    # The tensor leaves its storage, which the transfer keeps.
    "set_": ("leaves", "box['tensor'].set_(torch.empty(0, dtype=torch.uint8))"),
    ".data =": ("leaves", "setattr(box['tensor'], 'data', torch.empty(0, dtype=torch.uint8))"),
    "del": ("leaves", "box.clear()"),
    # torch's C function, past the Python method that waits: the storage gets new memory.
    "share, C function": (
        "moved",
        "torch._C.StorageBase._share_fd_cpu_(box['tensor'].untyped_storage())",
    ),
}


@pytest.mark.slow  # starts an interpreter
def test_memory_freed_under_a_transfer_is_never_used(tmp_path: pathlib.Path) -> None:
    # A transfer held its storage object, not the storage's memory: a C++ op that grew the
    # tensor (out=, torch.resize_as_, aten resize_), or share_memory_, freed the memory
    # mid-transfer. Reads then landed in whatever took that memory next (an unrelated
    # tensor) or failed with EFAULT; writes stored its bytes. Each route, each direction,
    # in one child (it may crash): each case says which one it survived.
    cases = [(kind, name) for name in ROUTES for kind in ("read", "write")]
    script = tmp_path / "freed_under_transfer.py"
    script.write_text(
        textwrap.dedent(PRELUDE)
        + textwrap.dedent(CASE)
        + "".join(
            f"case({kind!r}, {name!r}, {ROUTES[name][0]!r}, lambda box: {ROUTES[name][1]})\n"
            f"print('survived', {f'{name}-{kind}'!r}, sep='\\t', flush=True)\n"
            for kind, name in cases
        )
    )
    result = subprocess.run(
        [sys.executable, "-W", "ignore::UserWarning", str(script), str(tmp_path / "data.bin")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    survived = [line.split("\t")[1] for line in result.stdout.splitlines()]
    assert survived == [f"{name}-{kind}" for kind, name in cases], result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow  # starts an interpreter
@pytest.mark.parametrize("kind", ["read", "write"])
def test_a_forked_child_gets_its_storages_back(tmp_path: pathlib.Path, kind: str) -> None:
    # While a transfer runs, its storage is not resizable and the transfer holds the memory;
    # the child of a fork has no transfers: its copy of the storage must own its memory
    # again and be resizable, or the memory is freed when the child drops the transfer.
    script = tmp_path / "fork_mid_transfer.py"
    script.write_text(
        textwrap.dedent(PRELUDE)
        + textwrap.dedent(
            """
            import gc
            kind = sys.argv[2]
            tensor = torch.full((n,), 7, dtype=torch.uint8)
            gate, entered, unhold = hold(kind)
            with AsyncIO(queue_depth=1) as engine:
                request = getattr(engine, kind)(tensor, path)
                entered.wait()
                pid = os.fork()
                if pid == 0:
                    code = 3
                    try:
                        torch.set_num_threads(1)  # the parent's OpenMP pool is not here
                        gc.collect()
                        probes = [torch.zeros(n, dtype=torch.uint8) for _ in range(3)]
                        kept = torch.equal(tensor, SEVENS)
                        torch.empty(2 * n, dtype=torch.uint8, out=tensor)  # refused if held
                        kept = kept and torch.equal(tensor[:n], SEVENS)
                        clean = all(int(p.count_nonzero()) == 0 for p in probes)
                        code = 0 if kept and clean else 4
                    finally:
                        os._exit(code)
                _, status = os.waitpid(pid, 0)
                gate.set()
                assert request.result() == n
            unhold()
            print("child", os.waitstatus_to_exitcode(status), flush=True)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data.bin"), kind],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "child 0", result.stderr[-3000:]


def test_a_request_on_memory_replaced_under_a_running_one_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch's C function gives the storage new memory past the wrapped methods; the running
    # read keeps the old memory and fails. A second request took the new memory with the
    # first one's hold, which keeps only the old: it ran unheld, and its result() said its
    # bytes did not arrive although they did. Now it is refused, and opens nothing.
    import os
    import threading

    import torch

    from accel.io import AsyncIO

    path, n = tmp_path / "data.bin", 1 << 16
    real, gate, entered = os.preadv, threading.Event(), threading.Event()

    def held(*args: object) -> int:
        entered.set()
        gate.wait(30)
        return real(*args)  # type: ignore[arg-type]

    with AsyncIO() as engine:
        engine.write(torch.full((n,), 7, dtype=torch.uint8), path).result()
        tensor = torch.zeros(n, dtype=torch.uint8)
        monkeypatch.setattr(os, "preadv", held)
        first = engine.read(tensor, path)
        assert entered.wait(30)
        torch._C.StorageBase._share_fd_cpu_(tensor.untyped_storage())  # type: ignore[attr-defined]
        descriptors = len(os.listdir("/proc/self/fd"))
        with pytest.raises(RuntimeError, match="memory was replaced while earlier requests"):
            engine.read(tensor, path)
        assert len(os.listdir("/proc/self/fd")) == descriptors
        gate.set()
        with pytest.raises(RuntimeError, match="did not reach"):
            first.result()
        monkeypatch.undo()
        engine.read(tensor, path).result()  # once it ended, the storage is usable again
        assert bool((tensor == 7).all())


def test_ctrl_c_right_after_the_swap_gives_the_storage_its_memory_back(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C after hold() swapped the storage's pointer and before it recorded the hold: the
    # owning pointer went with the dropped owner (the memory freed) while the storage kept
    # using the memory, not resizable, for ever.
    import torch

    from accel.io import AsyncIO, _lifetime

    path, n = tmp_path / "data.bin", 1 << 16
    path.write_bytes(bytes(n))
    real_swap, calls = _lifetime._swap, [0]
    assert real_swap is not None

    def swap_then_interrupt(storage: torch.UntypedStorage, other: torch.UntypedStorage) -> None:
        real_swap(storage, other)
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt

    tensor = torch.zeros(n, dtype=torch.uint8)
    storage, address = tensor.untyped_storage(), tensor.data_ptr()
    monkeypatch.setattr(_lifetime, "_swap", swap_then_interrupt)
    with AsyncIO() as engine:
        with pytest.raises(KeyboardInterrupt):
            engine.read(tensor, path)
        assert engine.pending() == 0
    monkeypatch.undo()
    assert storage.resizable(), "the storage kept the borrowed pointer"
    assert _lifetime._key(storage) not in _lifetime._held
    assert storage.data_ptr() == address
    storage.resize_(2 * n)  # owns its memory again: frees the old, takes new
    assert storage.nbytes() == 2 * n
