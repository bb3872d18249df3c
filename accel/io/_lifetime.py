"""What keeps a transfer's memory allocated until the transfer ends, whatever the caller does.

A transfer moves bytes between a file and a storage's memory while the caller's thread goes
on. torch frees a storage's memory in three ways, and each is covered here:

- The storage object goes (``del``, ``t.data = ...``, ``t.set_(other)``): a transfer holds
  the storage (:class:`Hold`), so its memory stays.
- Python calls that move the memory in place (``UntypedStorage.resize_``, a growing
  ``Tensor.resize_``/``resize_as_``, ``share_memory_`` and the multiprocessing reductions
  through ``_share_fd_cpu_``/``_share_filename_cpu_``, ``UntypedStorage._swap_data_ptr_``):
  wrapped at import to wait until no transfer holds the storage (either storage, for a
  swap), then run.
- C++ ops that grow the storage (every ``out=`` argument torch resizes, ``torch.resize_as_``,
  ``torch.ops.aten.resize_``, ``set_`` past the storage's end): nothing in Python sees them.
  They all pass through ``at::native::resize_bytes_cpu``, which refuses a storage that is not
  resizable before it allocates or frees anything. So while a transfer runs, the storage
  holds a second, non-owning pointer to the same memory and is not resizable (swapped in
  with ``UntypedStorage._swap_data_ptr_``, which moves the pointer, size, resizable flag and
  allocator together), while the hold keeps torch's owning pointer; the last transfer to end
  swaps them back. Growing the storage from C++ meanwhile raises torch's ``RuntimeError``
  ("Trying to resize storage that is not resizable") and frees nothing.

Storages that are not resizable already (``from_numpy``, ``frombuffer``, shared memory) are
left as they are: C++ cannot grow them, and the Python calls above wait.

``Tensor.numpy()`` marks its storage not resizable for good (the array uses the memory).
Called while the storage is swapped, it marks the swapped-in flag, which the swap back
replaces: an array taken during a transfer does not keep the storage from being resized
after it (docs/io.md says so; seeing the call would take wrapping ``Tensor.numpy`` for
every caller in the process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch

# torch >= the release that added UntypedStorage._swap_data_ptr_ (2.13 has it); without
# it, C++ ops that grow a storage under a transfer are not refused (docs/io.md).
_swap: Callable[[torch.UntypedStorage, torch.UntypedStorage], None] | None = getattr(
    torch.UntypedStorage, "_swap_data_ptr_", None
)
_borrow: Callable[[int, torch.device, int], torch.UntypedStorage] | None = getattr(
    torch._C,  # pyright: ignore[reportPrivateUsage]
    "_construct_storage_from_data_pointer",
    None,
)


def _key(storage: torch.UntypedStorage) -> int:
    """The storage's StorageImpl, which every Python object and view of it shares."""
    return int(storage._cdata)  # pyright: ignore[reportPrivateUsage]


@dataclass(eq=False)
class Hold:
    """One storage that transfers are using, and what keeps its memory."""

    storage: torch.UntypedStorage  # the caller's storage, alive until the last transfer ends
    address: int  # its data address when the first transfer began
    nbytes: int
    owner: torch.UntypedStorage | None  # holds torch's owning pointer while swapped
    count: int = 1

    def moved(self) -> bool:
        """Whether the storage's memory is no longer the memory the transfers used."""
        try:
            address = self.storage.data_ptr()
        except RuntimeError:  # torch's "invalid python storage": no memory at all
            return True
        return address != self.address or self.storage.nbytes() != self.nbytes

    def give_back(self) -> None:
        """Return the owning pointer to the storage, unless the storage has other memory
        now (then the owner frees the old memory when it goes)."""
        owner, self.owner = self.owner, None
        # A borrowed storage is not resizable; once swapped, it holds the storage's own
        # flag (True: only resizable storages are swapped). Not swapped yet: nothing to undo.
        if owner is None or _swap is None or not owner.resizable() or self.moved():
            return
        _swap(self.storage, owner)


_held: dict[int, Hold] = {}  # by StorageImpl (``_cdata``): views of one storage share it
_changed = threading.Condition()


def hold(storage: torch.UntypedStorage, into: list[Hold]) -> Hold:
    """Keep ``storage``'s memory allocated until :func:`release`; called in the caller's
    thread (the swap must not race the caller's own resizes).

    The hold is appended to ``into`` before this returns, so a caller that reads ``into``
    in its cleanup releases it even when an exception (Ctrl-C) arrives as this returns.
    """
    with _changed:
        held = _held.get(_key(storage))
        if held is not None:
            if held.moved():
                # Only a call that skips the wrapped methods gets here (a C function such as
                # torch._C.StorageBase._share_fd_cpu_). The hold keeps the old memory for
                # the requests that use it; a new one would use the new memory, unheld.
                raise RuntimeError(
                    "the storage's memory was replaced while earlier requests on it run, "
                    "by a call accel.io cannot see (such as torch._C.StorageBase."
                    "_share_fd_cpu_); wait for those requests before starting another"
                )
            held.count += 1
            into.append(held)
            return held
        address = storage.data_ptr()  # materialises a copy-on-write storage first
        nbytes = storage.nbytes()
        held = Hold(storage, address, nbytes, None)
        # Registered before the swap: from the swap on, the Python calls that free the
        # memory wait for it.
        _held[_key(storage)] = held
        try:
            if (
                _swap is not None
                and _borrow is not None
                and nbytes
                and storage.resizable()
                and not storage.is_shared()
            ):
                held.owner = _borrow(address, storage.device, nbytes)
                _swap(storage, held.owner)
        except BaseException:
            # Ctrl-C around the swap: the storage gets its owning pointer back, if it gave
            # it away, before the owner that held it is dropped (and frees the memory).
            del _held[_key(storage)]
            held.give_back()
            raise
        into.append(held)  # the caller's from here: it releases it on any failure
        return held


def release(held: Hold) -> bool:
    """End one transfer's use of ``held``; the last one gives the memory back.

    Returns:
        Whether the storage's memory had been replaced while the transfer ran (the memory
        the transfer used was kept, so nothing foreign was touched).
    """
    with _changed:
        try:
            moved = held.moved()
            held.count -= 1
            if not held.count:
                del _held[_key(held.storage)]
                held.give_back()
        finally:  # a resize waiting for the storage must hear of it, whatever happened
            _changed.notify_all()
    return moved


def forget_after_fork() -> None:
    """In a forked child, where no transfer runs: give every storage its memory back."""
    global _changed
    for held in _held.values():
        held.give_back()
    _held.clear()
    _changed = threading.Condition()  # a parent thread may have held it


def _wait_for_transfers(*storages: torch.UntypedStorage) -> None:
    with _changed:
        while any(_key(storage) in _held for storage in storages):
            _changed.wait()


_torch_resize: Callable[[torch.UntypedStorage, int], torch.UntypedStorage] = getattr(  # noqa: B009
    torch.UntypedStorage, "resize_"
)
_torch_share_fd: Callable[..., object] = getattr(torch.UntypedStorage, "_share_fd_cpu_")  # noqa: B009
_torch_share_filename: Callable[..., object] = getattr(  # noqa: B009
    torch.UntypedStorage, "_share_filename_cpu_"
)
_torch_tensor_resize: Callable[..., torch.Tensor] = getattr(torch.Tensor, "resize_")  # noqa: B009
_torch_tensor_resize_as: Callable[..., torch.Tensor] = getattr(torch.Tensor, "resize_as_")  # noqa: B009


def _resize_after_transfers(storage: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
    """``UntypedStorage.resize_``, once no accel.io transfer uses the storage's memory."""
    if _held:
        _wait_for_transfers(storage)
    return _torch_resize(storage, size)


def _share_fd_after_transfers(
    storage: torch.UntypedStorage, *args: object, **kwargs: object
) -> object:
    """``UntypedStorage._share_fd_cpu_`` (``share_memory_``), once no accel.io transfer uses
    the storage's memory: it moves the bytes to shared memory and frees the old ones."""
    if _held:
        _wait_for_transfers(storage)
    return _torch_share_fd(storage, *args, **kwargs)


def _share_filename_after_transfers(
    storage: torch.UntypedStorage, *args: object, **kwargs: object
) -> object:
    """``UntypedStorage._share_filename_cpu_``, once no accel.io transfer uses the storage's
    memory."""
    if _held:
        _wait_for_transfers(storage)
    return _torch_share_filename(storage, *args, **kwargs)


def _requested_numel(sizes: tuple[object, ...]) -> int | None:
    """The element count ``Tensor.resize_(*sizes)`` asks for; None where the sizes are not
    plain ints (symbolic or NumPy sizes: the caller then waits, and torch checks them)."""
    dims = sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes
    if not isinstance(dims, Iterable):
        return None
    numel = 1
    for dim in cast("Iterable[object]", dims):
        if not isinstance(dim, int):
            return None
        numel *= dim
    return numel


def _wait_if_growing(tensor: torch.Tensor, numel: int | None) -> None:
    # Growing past the storage moves it to a new allocation and frees the old one.
    if tensor.device.type != "cpu":
        return  # accel.io only moves CPU memory
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return  # a tensor without storage (a wrapper subclass, a functional tensor)
    if _key(storage) not in _held:
        return
    if (
        numel is None
        or (tensor.storage_offset() + numel) * tensor.element_size() > storage.nbytes()
    ):
        _wait_for_transfers(storage)


def _swap_after_transfers(storage: torch.UntypedStorage, other: object) -> None:
    """``UntypedStorage._swap_data_ptr_``, once no accel.io transfer uses either storage's
    memory: under a transfer, the storage's pointer is the transfer's non-owning one, which
    the swap would hand to ``other``, to dangle when the transfer ends."""
    swap: Any = _swap  # installed only where torch has it; torch names a wrong `other`
    if _held and isinstance(other, torch.UntypedStorage):
        _wait_for_transfers(storage, other)
    swap(storage, other)


def _tensor_resize_after_transfers(
    tensor: torch.Tensor, *sizes: object, **kwargs: object
) -> torch.Tensor:
    """``Tensor.resize_``; one that grows the storage first waits for its accel.io transfers."""
    if _held:
        requested = (kwargs["size"],) if not sizes and "size" in kwargs else sizes
        _wait_if_growing(tensor, _requested_numel(requested))
    return _torch_tensor_resize(tensor, *sizes, **kwargs)


def _tensor_resize_as_after_transfers(
    tensor: torch.Tensor, template: object, **kwargs: object
) -> torch.Tensor:
    """``Tensor.resize_as_``; one that grows the storage first waits for its accel.io
    transfers."""
    if _held:
        numel = template.numel() if isinstance(template, torch.Tensor) else None
        _wait_if_growing(tensor, numel)
    return _torch_tensor_resize_as(tensor, template, **kwargs)


setattr(torch.UntypedStorage, "resize_", _resize_after_transfers)  # noqa: B010  (typed above)
setattr(torch.UntypedStorage, "_share_fd_cpu_", _share_fd_after_transfers)  # noqa: B010
setattr(torch.UntypedStorage, "_share_filename_cpu_", _share_filename_after_transfers)  # noqa: B010
setattr(torch.Tensor, "resize_", _tensor_resize_after_transfers)  # noqa: B010
setattr(torch.Tensor, "resize_as_", _tensor_resize_as_after_transfers)  # noqa: B010
if _swap is not None:
    setattr(torch.UntypedStorage, "_swap_data_ptr_", _swap_after_transfers)  # noqa: B010
