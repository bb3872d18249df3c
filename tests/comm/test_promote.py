"""The rules that decide whether a reduced tensor's storage moves into the pool
(:mod:`accel.comm._promote`), in one process: a tensor hook run by the autograd engine
stands in for DDP's reducer (its Python caller is the engine's entry, as the reducer's
all-reduce is), and a one-rank segment gives the pool."""

from __future__ import annotations

import math
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.comm import _promote
from accel.comm._segment import summable_codes

_shm_comm = pytest.importorskip("accel.ops._shm_comm")
POOL = 4 << 20


@pytest.fixture(scope="module")
def shm() -> Any:
    communicator = _shm_comm.Communicator("", True, 0, 1, 1 << 20, 7, [os.getpid()], POOL)
    communicator.release()
    return types.SimpleNamespace(communicator=communicator, codes=summable_codes())


class _BucketView(torch.nn.Module):
    """What the rules ask of a DDP model: its setting and its parameters."""

    def __init__(self, grads: list[torch.Tensor], as_view: bool) -> None:
        super().__init__()
        self.gradient_as_bucket_view = as_view
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(g.shape)) for g in grads
        )
        for parameter, grad in zip(self.params, grads, strict=True):
            parameter.grad = grad


def _from_the_engine(promotions: _promote.Promotions, tensor: torch.Tensor, shm: Any) -> bool:
    """``consider`` called the way the reducer's all-reduce is: from inside ``backward``."""
    moved: list[bool] = []
    leaf = torch.zeros(1, requires_grad=True)

    def hook(grad: torch.Tensor) -> torch.Tensor:
        moved.append(promotions.consider(tensor, sys._getframe(1), shm))
        return grad

    leaf.register_hook(hook)
    leaf.sum().backward()
    return moved[0]


_KEPT: list[torch.nn.Module] = []  # the group holds its models weakly: keep them alive


def _promotions(*models: torch.nn.Module) -> _promote.Promotions:
    promotions = _promote.Promotions()
    for model in models:
        _KEPT.append(model)
        promotions._models.add(model)  # pyright: ignore[reportPrivateUsage]
    return promotions


@given(
    numel=st.integers(2048, 200_000),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_a_private_bucket_moves_on_its_second_sight_with_its_bytes_and_views(
    numel: int, dtype: torch.dtype, shm: Any
) -> None:
    reducer = _Reducer([(numel - 2,), (2,)], as_view=False, bucket=torch.randn(numel).to(dtype))
    bucket = reducer.bucket
    before = bucket.clone()
    promotions = _promotions(reducer.model)
    assert not _from_the_engine(promotions, bucket, shm)  # first sight: stays
    where = bucket.data_ptr()
    assert _from_the_engine(promotions, bucket, shm)
    assert bucket.data_ptr() != where
    assert torch.equal(bucket, before)
    # The reducer's views follow their storage.
    assert reducer.input_view(1).data_ptr() == bucket.data_ptr() + (numel - 2) * dtype.itemsize
    assert not _from_the_engine(promotions, bucket, shm)  # once
    taken = shm.communicator.pool_bytes - shm.communicator.pool_free_bytes
    assert taken >= bucket.nbytes
    assert promotions.pooled() == [bucket.untyped_storage().nbytes()]
    del bucket, reducer
    assert shm.communicator.pool_free_bytes == shm.communicator.pool_bytes  # back with it


def _numpy_made(n: int) -> torch.Tensor:
    return torch.from_numpy(np.ones(n, dtype=np.float32))


def _frombuffer(n: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(4 * n), dtype=torch.float32)


def _shared(n: int) -> torch.Tensor:
    return torch.ones(n).share_memory_()


def _a_slice(n: int) -> torch.Tensor:
    return torch.ones(2 * n)[:n]


def _strided(n: int) -> torch.Tensor:
    return torch.ones(2 * n)[::2]


def _small(n: int) -> torch.Tensor:
    del n
    return torch.ones(_promote.MIN_BYTES // 4 - 1)


def _float64(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.float64)


OTHERS_MEMORY: list[Callable[[int], torch.Tensor]] = [
    _numpy_made, _frombuffer, _shared, _a_slice, _strided, _small, _float64,
]  # fmt: skip


@pytest.mark.parametrize("make", OTHERS_MEMORY, ids=lambda f: f.__name__.strip("_"))
def test_memory_that_is_not_a_whole_ordinary_storage_stays(
    make: Callable[[int], torch.Tensor], shm: Any
) -> None:
    tensor = make(4096)
    promotions = _promotions(_BucketView([], as_view=False))
    where = tensor.data_ptr()
    for _ in range(3):
        assert not _from_the_engine(promotions, tensor, shm)
    assert tensor.data_ptr() == where


def test_a_direct_call_or_no_known_model_never_moves(shm: Any) -> None:
    bucket = torch.ones(4096)
    promotions = _promotions(_BucketView([], as_view=False))
    for _ in range(3):  # called from Python, not by the autograd engine
        assert not promotions.consider(bucket, sys._getframe(0), shm)
    lone = _promote.Promotions()  # no DDP model recorded on the group
    for _ in range(3):
        assert not _from_the_engine(lone, bucket, shm)
    off = _promotions(_BucketView([], as_view=False))
    off.enabled = False
    for _ in range(3):
        assert not _from_the_engine(off, bucket, shm)


class _Reducer:
    """What DDP's reducer holds of a bucket: the bucket, an input and an output view per
    parameter (the input views in C++, as the reducer's vector holds them), and in C++
    three more references to the bucket tensor (the reducer's, and the tensor lists of the
    call); with ``as_view`` each parameter's .grad is its input view. The use counts are
    then the real reducer's (tests/comm/scripts/ddp_pool_check.py checks those)."""

    def __init__(
        self,
        shapes: list[tuple[int, ...]],
        as_view: bool = True,
        bucket: torch.Tensor | None = None,
    ) -> None:
        sizes = [math.prod(shape) for shape in shapes]
        self.bucket = torch.zeros(sum(sizes)) if bucket is None else bucket
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        views = [
            self.bucket[offset : offset + size].view(shape)
            for offset, size, shape in zip(offsets, sizes, shapes, strict=True)
        ]
        self.model = _BucketView(views if as_view else [], as_view=as_view)
        script_list: Any = torch._C.ScriptList  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        self._inputs = script_list(views)  # a list held in C++, as the reducer's vector is
        self._outputs = [
            self.bucket[offset : offset + size].view(shape)
            for offset, size, shape in zip(offsets, sizes, shapes, strict=True)
        ]
        self._held = script_list([self.bucket] * (_promote.BUCKET_OVER_STORAGE_USES + 1))

    def grad(self, index: int) -> torch.Tensor:
        grad = self.model.params[index].grad
        assert grad is not None
        return grad

    def input_view(self, index: int) -> torch.Tensor:
        view: torch.Tensor = self._inputs[index]
        return view


def _np_dlpack_of_a_view(grad: torch.Tensor) -> object:
    return np.from_dlpack(grad.view(-1))


@pytest.mark.parametrize(
    ("extra", "moves_once_dropped"),
    [(lambda g: g.numpy(), False), (lambda g: memoryview(g.numpy()), False),
     (lambda g: g.view(-1), True), (torch.from_dlpack, True), (np.from_dlpack, True),
     (_np_dlpack_of_a_view, True)],
    ids=["numpy", "memoryview", "a view", "torch dlpack", "numpy dlpack",
         "numpy dlpack of a view"],
)  # fmt: skip
def test_a_bucket_whose_grad_views_someone_holds_stays(
    extra: Callable[[torch.Tensor], object], moves_once_dropped: bool, shm: Any
) -> None:
    reducer = _Reducer([(64, 64), (64, 64)])
    bucket = reducer.bucket
    promotions = _promotions(reducer.model)
    held = extra(reducer.grad(0))
    for _ in range(3):
        assert not _from_the_engine(promotions, bucket, shm)
    # Once no one else holds it, it moves (from a new first sight); a storage that ever
    # gave numpy its memory never does (torch marks it not resizable).
    del held
    assert not _from_the_engine(promotions, _fresh_sight(promotions, bucket), shm)
    assert _from_the_engine(promotions, bucket, shm) is moves_once_dropped
    assert reducer.grad(0).data_ptr() == bucket.data_ptr()


def test_a_bucket_with_unset_grads_waits_until_they_are_set(shm: Any) -> None:
    # find_unused_parameters: an unused parameter's .grad stays None through the
    # all-reduce, while the reducer still holds its views, so the bucket's use count
    # cannot be checked. It is looked at again, not refused for good (its other
    # parameters' buckets would never move), and moves once every .grad is set.
    reducer = _Reducer([(64, 64), (64, 64)])
    promotions = _promotions(reducer.model)
    grad = reducer.grad(1)
    reducer.model.params[1].grad = None
    assert not _from_the_engine(promotions, reducer.bucket, shm)  # first sight
    for _ in range(3):
        assert not _from_the_engine(promotions, reducer.bucket, shm)
    reducer.model.params[1].grad = grad  # used again
    assert _from_the_engine(promotions, reducer.bucket, shm)


def test_a_view_held_while_grads_were_unset_keeps_the_bucket(shm: Any) -> None:
    reducer = _Reducer([(64, 64), (64, 64)])
    promotions = _promotions(reducer.model)
    grad = reducer.grad(1)
    reducer.model.params[1].grad = None
    held = np.from_dlpack(reducer.bucket[4096:].view(-1))  # outside DDP, on the bucket
    for _ in range(_promote.DEFERRALS - 1):
        assert not _from_the_engine(promotions, reducer.bucket, shm)
    reducer.model.params[1].grad = grad  # every view is known now: one is extra
    assert not _from_the_engine(promotions, reducer.bucket, shm)
    assert held.ctypes.data == reducer.bucket[4096:].data_ptr()
    del held
    assert not _from_the_engine(promotions, _fresh_sight(promotions, reducer.bucket), shm)
    assert _from_the_engine(promotions, reducer.bucket, shm)


def test_a_bucket_without_grads_moves_only_when_no_bucket_view_model_could_own_it(
    shm: Any,
) -> None:
    viewing = _Reducer([(64, 64)])
    viewing.model.params[0].grad = None  # every parameter of the bucket unused
    promotions = _promotions(viewing.model)
    assert not _from_the_engine(promotions, viewing.bucket, shm)  # first sight
    for _ in range(_promote.DEFERRALS + 2):  # looked at DEFERRALS times, then it stays
        assert not _from_the_engine(promotions, viewing.bucket, shm)
    seen = promotions._seen  # pyright: ignore[reportPrivateUsage]
    assert [s.refused for s in seen.values()] == [
        "no .grad is on it and a gradient_as_bucket_view model may own it, at 8 sights"
    ]
    private = _Reducer([(64, 64)], as_view=False)  # only C++ reaches its bucket
    copying = _promotions(private.model)
    assert not _from_the_engine(copying, private.bucket, shm)
    assert _from_the_engine(copying, private.bucket, shm)


def test_a_tensor_the_engine_reduces_that_is_no_bucket_stays(shm: Any) -> None:
    # A TorchScript hook all-reducing a buffer of its own reaches the group as the reducer
    # does; with a copying model on the group the buffer was taken for its bucket, moved,
    # and a DLPack view of it read freed memory.
    promotions = _promotions(_Reducer([(64, 64)], as_view=False).model)
    statistics = torch.ones(1 << 14)
    seen = np.from_dlpack(statistics)
    for _ in range(3):
        assert not _from_the_engine(promotions, statistics, shm)
    alone = torch.ones(1 << 14)  # held by nothing else either: still not a bucket's counts
    for _ in range(3):
        assert not _from_the_engine(promotions, alone, shm)
    assert seen.ctypes.data == statistics.data_ptr()


@pytest.mark.parametrize("as_view", [True, False])
def test_a_bucket_whose_tensor_itself_someone_holds_stays(as_view: bool, shm: Any) -> None:
    # A DLPack export of the bucket (a bucket-view .grad's ``_base``) holds the bucket
    # tensor, not a new tensor on its storage.
    reducer = _Reducer([(64, 64), (64, 64)], as_view=as_view)
    promotions = _promotions(reducer.model)
    held = np.from_dlpack(reducer.bucket)
    for _ in range(3):
        assert not _from_the_engine(promotions, reducer.bucket, shm)
    assert held.ctypes.data == reducer.bucket.data_ptr()
    del held
    assert not _from_the_engine(promotions, _fresh_sight(promotions, reducer.bucket), shm)
    assert _from_the_engine(promotions, reducer.bucket, shm)


def test_a_bucket_moved_out_again_is_no_longer_counted_in_the_pool(shm: Any) -> None:
    reducer = _Reducer([(64, 64)])
    promotions = _promotions(reducer.model)
    assert not _from_the_engine(promotions, reducer.bucket, shm)
    assert _from_the_engine(promotions, reducer.bucket, shm)
    assert promotions.pooled() == [reducer.bucket.nbytes]
    reducer.bucket.share_memory_()  # Hogwild's model.share_memory() on bucket views
    assert promotions.pooled() == []
    assert torch.equal(reducer.grad(0), reducer.bucket.view(64, 64))


def _fresh_sight(promotions: _promote.Promotions, bucket: torch.Tensor) -> torch.Tensor:
    """Forget what was decided about ``bucket`` (a refusal is final for a storage)."""
    promotions._seen.clear()  # pyright: ignore[reportPrivateUsage]
    return bucket


def test_torch_offers_its_bucket_allocation_hook_to_cpp_backends_only() -> None:
    # DDP's reducer and FSDP2 can ask a backend to allocate their buffers
    # (supports_tensor_alloc / allocate_tensor), but a Python process group has no C++
    # backend to ask and cannot make one. When this fails, torch opened the hook to
    # Python: use it instead of moving buckets (docs/collectives.md).
    backend: Any = torch._C._distributed_c10d.Backend  # pyright: ignore[reportPrivateUsage]

    class Offering(backend):  # type: ignore[misc,valid-type]
        def supports_tensor_alloc(self, device: torch.device) -> bool:
            return True

    with pytest.raises(TypeError, match="No constructor defined"):
        Offering(0, 1)
