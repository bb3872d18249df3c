"""Tensors in the segment's pools: the collectives that go straight between them.

The ranks here are communicators of one segment in this process, one thread each (the
native calls release the GIL, so the threads run the protocol concurrently, as processes
would). Every result is compared bit for bit with the staged path (through the slots) on
the same inputs, which tests/comm/test_collectives.py compares with gloo.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.comm import _segment, shared_empty, try_shared_empty

_shm_comm = pytest.importorskip("accel.ops._shm_comm")

POOL = 16 << 20
SLOT = 1 << 20  # small slots: the staged path goes in several chunks from 256Ki fp32
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _ranks(world: int, pool: int = POOL) -> list[Any]:
    """The communicators of one segment, rank 0 first (all in this process)."""
    pids = [os.getpid()] * world
    owner = _shm_comm.Communicator("", True, 0, world, SLOT, 42, pids, pool)
    peers = [
        _shm_comm.Communicator(owner.path(), False, r, world, SLOT, 42, pids, pool)
        for r in range(1, world)
    ]
    owner.release()
    return [owner, *peers]


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def ranks(request: pytest.FixtureRequest) -> list[Any]:
    return _ranks(request.param)


def _together(ranks: list[Any], call: Callable[[int, Any], object]) -> list[object]:
    """``call(rank, communicator)`` on one thread per rank; every result (or error)."""
    results: list[object] = [None] * len(ranks)

    def run(rank: int) -> None:
        try:
            results[rank] = call(rank, ranks[rank])
        except Exception as error:  # the test looks at it
            results[rank] = error

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(ranks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a rank hung"
    return results


def _pooled(communicator: Any, values: torch.Tensor) -> torch.Tensor:
    """A copy of ``values`` in ``communicator``'s pool."""
    block = communicator.allocate(values.numel() * values.element_size())
    assert block is not None
    tensor = torch.frombuffer(block, dtype=values.dtype, count=values.numel())
    return tensor.copy_(values)


def _all_reduce(ranks: list[Any], tensors: list[torch.Tensor]) -> list[object]:
    code = _shm_comm.DTYPES[str(tensors[0].dtype).removeprefix("torch.")]
    return _together(
        ranks,
        lambda r, c: c.all_reduce(tensors[r].data_ptr(), tensors[r].numel(), code, True, 20.0),
    )


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8)


# Sizes around where the sums split across the ranks (4Ki 16-bit, 48Ki fp32 elements) and
# past one slot's chunk (256Ki fp32, 512Ki 16-bit).
SIZES = st.one_of(
    st.integers(1, 300),
    st.integers(3_900, 4_300),
    st.integers(48_000, 50_000),
    st.integers(255_000, 600_000),
)


@given(numel=SIZES, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31))
def test_pooled_tensors_end_with_the_staged_paths_bits(
    ranks: list[Any], numel: int, dtype: torch.dtype, seed: int
) -> None:
    world = len(ranks)
    generator = torch.Generator().manual_seed(seed)
    values = [torch.randn(numel, generator=generator).to(dtype) for _ in range(world)]
    staged = [v.clone() for v in values]
    pooled = [_pooled(c, v) for c, v in zip(ranks, values, strict=True)]
    before = [c.pooled_calls["all_reduce"] for c in ranks]
    assert _all_reduce(ranks, staged) == [True] * world
    assert _all_reduce(ranks, pooled) == [True] * world
    assert [c.pooled_calls["all_reduce"] - b for c, b in zip(ranks, before, strict=True)] == [
        1
    ] * world
    for tensor in [*staged, *pooled]:
        assert torch.equal(_bits(tensor), _bits(staged[0]))


def test_a_view_into_a_pooled_tensor_is_pooled(ranks: list[Any]) -> None:
    world = len(ranks)
    bases = [_pooled(c, torch.full((1000,), float(r + 1))) for r, c in enumerate(ranks)]
    views = [base[100:600] for base in bases]  # at offset 400 bytes, not a cache line
    before = ranks[0].pooled_calls["all_reduce"]
    assert _all_reduce(ranks, views) == [True] * world
    assert ranks[0].pooled_calls["all_reduce"] == before + 1
    total = float(sum(range(1, world + 1)))
    for r, base in enumerate(bases):
        assert torch.equal(base[100:600], torch.full((500,), total))
        assert torch.equal(base[:100], torch.full((100,), float(r + 1)))  # untouched
        assert torch.equal(base[600:], torch.full((400,), float(r + 1)))


@pytest.mark.parametrize("plain_rank", [0, -1], ids=["rank 0 plain", "last rank plain"])
def test_one_plain_tensor_takes_every_rank_to_the_staged_path(
    ranks: list[Any], plain_rank: int
) -> None:
    world = len(ranks)
    generator = torch.Generator().manual_seed(7)
    values = [torch.randn(70_000, generator=generator) for _ in range(world)]
    reference = [v.clone() for v in values]
    assert _all_reduce(ranks, reference) == [True] * world
    mixed = [_pooled(c, v) for c, v in zip(ranks, values, strict=True)]
    mixed[plain_rank] = values[plain_rank].clone()
    before = [c.pooled_calls["all_reduce"] for c in ranks]
    assert _all_reduce(ranks, mixed) == [True] * world
    assert [c.pooled_calls["all_reduce"] for c in ranks] == before  # nobody summed between pools
    for tensor in mixed:
        assert torch.equal(tensor, reference[0])
    # The ranks still agree on every later step.
    again = [_pooled(c, torch.ones(10)) for c in ranks]
    assert _all_reduce(ranks, again) == [True] * world
    assert all(torch.equal(t, torch.full((10,), float(world))) for t in again)


def test_a_rank_that_cannot_use_the_segment_makes_every_rank_fall_back(
    ranks: list[Any],
) -> None:
    world = len(ranks)
    pooled = [_pooled(c, torch.ones(64)) for c in ranks]
    fp32 = _shm_comm.DTYPES["float32"]

    def call(rank: int, communicator: Any) -> object:
        eligible = rank != 1  # rank 1's tensor is, say, on another device
        return communicator.all_reduce(pooled[rank].data_ptr(), 64, fp32, eligible, 20.0)

    assert _together(ranks, call) == [False] * world
    assert all(torch.equal(t, torch.ones(64)) for t in pooled)  # nothing was touched


def test_a_silent_peer_times_out_on_the_pooled_path() -> None:
    ranks = _ranks(2)
    tensor = _pooled(ranks[0], torch.ones(1000))
    fp32 = _shm_comm.DTYPES["float32"]
    with pytest.raises(RuntimeError, match=r"timed out after 0\.2.*rank 1 did not reach"):
        ranks[0].all_reduce(tensor.data_ptr(), 1000, fp32, True, 0.2)
    with pytest.raises(RuntimeError, match="this communicator failed earlier"):
        ranks[0].all_reduce(tensor.data_ptr(), 1000, fp32, True, 0.2)


@pytest.mark.parametrize("pooled", [True, False], ids=["pooled", "staged"])
def test_a_peer_late_past_the_timeout_touches_nothing_and_fails_too(pooled: bool) -> None:
    # Rank 0 gives up and is told the step failed; its caller reuses the tensor. Rank 1
    # comes later: it must neither sum into rank 0's tensor nor report success.
    ranks = _ranks(2)
    make = _pooled if pooled else (lambda _c, values: values.clone())
    tensors = [make(c, torch.ones(1 << 16)) for c in ranks]
    fp32 = _shm_comm.DTYPES["float32"]
    with pytest.raises(RuntimeError, match=r"timed out after 0\.3.*rank 1 did not reach"):
        ranks[0].all_reduce(tensors[0].data_ptr(), 1 << 16, fp32, True, 0.3)
    tensors[0].fill_(42.0)
    with pytest.raises(RuntimeError, match="step 1 failed: rank 0 gave up on it"):
        ranks[1].all_reduce(tensors[1].data_ptr(), 1 << 16, fp32, True, 20.0)
    assert torch.equal(tensors[0], torch.full((1 << 16,), 42.0))
    assert torch.equal(tensors[1], torch.ones(1 << 16))


def test_peers_stop_waiting_for_a_rank_that_left_after_an_error() -> None:
    # Ranks 0 and 1 meet; one gives up on rank 2 and fails the step: the other hears it at
    # once instead of waiting out its own (long) timeout, and rank 2 finds the step failed.
    ranks = _ranks(3)
    tensors = [_pooled(c, torch.ones(256)) for c in ranks]
    fp32 = _shm_comm.DTYPES["float32"]
    timeouts = [0.3, 60.0]
    started = time.monotonic()
    results = _together(
        ranks[:2],
        lambda r, c: c.all_reduce(tensors[r].data_ptr(), 256, fp32, True, timeouts[r]),
    )
    assert time.monotonic() - started < 20
    assert "timed out after 0.3" in str(results[0])
    assert "step 1 failed: rank 0 gave up on it" in str(results[1])
    with pytest.raises(RuntimeError, match="step 1 failed"):
        ranks[2].all_reduce(tensors[2].data_ptr(), 256, fp32, True, 20.0)
    assert all(torch.equal(t, torch.ones(256)) for t in tensors)


def _code(dtype: torch.dtype) -> int:
    return _segment.wire_code(dtype)


def _counts(ranks: list[Any], op: str) -> list[int]:
    return [int(c.pooled_calls[op]) for c in ranks]


def _all_gather(ranks: list[Any], parts: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
    nbytes = parts[0].numel() * parts[0].element_size()
    code = _code(parts[0].dtype)
    results = _together(
        ranks,
        lambda r, c: c.all_gather(
            parts[r].data_ptr(), outs[r].data_ptr(), nbytes, code, True, 20.0
        ),
    )
    assert results == [True] * len(ranks)


def _reduce_scatter(ranks: list[Any], inputs: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
    numel, code = outs[0].numel(), _code(outs[0].dtype)
    results = _together(
        ranks,
        lambda r, c: c.reduce_scatter(
            inputs[r].data_ptr(), outs[r].data_ptr(), numel, code, True, 20.0
        ),
    )
    assert results == [True] * len(ranks)


def _broadcast(ranks: list[Any], tensors: list[torch.Tensor], root: int) -> None:
    nbytes = tensors[0].numel() * tensors[0].element_size()
    code = _code(tensors[0].dtype)
    results = _together(
        ranks, lambda r, c: c.broadcast(tensors[r].data_ptr(), nbytes, code, root, True, 20.0)
    )
    assert results == [True] * len(ranks)


def _pooled_empty(communicator: Any, numel: int, dtype: torch.dtype) -> torch.Tensor:
    return _pooled(communicator, torch.zeros(numel, dtype=dtype))


# Byte counts on both sides of one slot (1 MiB here), and sizes that are no whole number of
# cache lines; any dtype travels (bytes are copied).
GATHER_SIZES = st.one_of(st.integers(1, 300), st.integers(1_040_000, 2_200_000))


@given(numel=GATHER_SIZES, dtype=st.sampled_from([torch.uint8, torch.float32, torch.int64]),
       in_place=st.booleans(), seed=st.integers(0, 2**31))  # fmt: skip
def test_pooled_all_gather_ends_with_the_staged_paths_bytes(
    ranks: list[Any], numel: int, dtype: torch.dtype, in_place: bool, seed: int
) -> None:
    world = len(ranks)
    numel = max(1, numel // torch.empty(0, dtype=dtype).element_size())
    generator = torch.Generator().manual_seed(seed)
    parts = [
        torch.randint(0, 100, (numel + 1,), generator=generator).to(dtype)[1:] for _ in range(world)
    ]
    staged_outs = [torch.empty(world * numel, dtype=dtype) for _ in range(world)]
    _all_gather(ranks, parts, staged_outs)
    assert torch.equal(staged_outs[0], torch.cat(parts))
    if in_place:  # FSDP2's way: each rank's part is its own block of a pooled output
        outs = [_pooled_empty(c, world * numel, dtype) for c in ranks]
        pooled = [
            out[r * numel : (r + 1) * numel].copy_(p)
            for r, (out, p) in enumerate(zip(outs, parts, strict=True))
        ]
    else:
        outs = [torch.empty(world * numel, dtype=dtype) for _ in range(world)]
        pooled = [_pooled(c, p) for c, p in zip(ranks, parts, strict=True)]
    before = _counts(ranks, "all_gather")
    _all_gather(ranks, pooled, outs)
    assert [a - b for a, b in zip(_counts(ranks, "all_gather"), before, strict=True)] == [1] * world
    for out in outs:
        assert torch.equal(out, staged_outs[0])
    for part, original in zip(pooled, parts, strict=True):
        assert torch.equal(part, original)  # the inputs are only read


@given(
    numel=SIZES, dtype=st.sampled_from(DTYPES), own_block=st.booleans(), seed=st.integers(0, 2**31)
)
def test_pooled_reduce_scatter_ends_with_the_staged_paths_bits(
    ranks: list[Any], numel: int, dtype: torch.dtype, own_block: bool, seed: int
) -> None:
    world = len(ranks)
    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(world * numel, generator=generator).to(dtype) for _ in range(world)]
    staged = [torch.empty(numel, dtype=dtype) for _ in range(world)]
    _reduce_scatter(ranks, inputs, staged)
    pooled = [_pooled(c, i) for c, i in zip(ranks, inputs, strict=True)]
    if own_block:  # the sum lands in this rank's own block of its input
        outs = [p[r * numel : (r + 1) * numel] for r, p in enumerate(pooled)]
    else:
        outs = [torch.empty(numel, dtype=dtype) for _ in range(world)]
    before = _counts(ranks, "reduce_scatter")
    _reduce_scatter(ranks, pooled, outs)
    assert [a - b for a, b in zip(_counts(ranks, "reduce_scatter"), before, strict=True)] == [
        1
    ] * world
    for r in range(world):
        assert torch.equal(_bits(outs[r]), _bits(staged[r]))
        others = [q for q in range(world) if q != r or not own_block]
        for q in others:  # the blocks the peers read are untouched
            block = slice(q * numel, (q + 1) * numel)
            assert torch.equal(_bits(pooled[r][block]), _bits(inputs[r][block]))


def test_a_reduce_scatter_output_on_a_peers_block_takes_the_staged_path(ranks: list[Any]) -> None:
    # Rank 0's out = rank 1's block of rank 0's pooled input: written while rank 1 would read
    # it from the pool, so the call must go through the slots (which copy first). The other
    # ranks' outputs are apart from their inputs.
    world, numel = len(ranks), 70_000
    generator = torch.Generator().manual_seed(3)
    inputs = [torch.randn(world * numel, generator=generator) for _ in range(world)]
    expected = [torch.empty(numel) for _ in range(world)]
    _reduce_scatter(ranks, inputs, expected)
    pooled = [_pooled(c, i) for c, i in zip(ranks, inputs, strict=True)]
    outs = [pooled[0][numel : 2 * numel], *(torch.empty(numel) for _ in range(1, world))]
    before = _counts(ranks, "reduce_scatter")
    _reduce_scatter(ranks, pooled, outs)
    assert _counts(ranks, "reduce_scatter") == before
    for out, want in zip(outs, expected, strict=True):
        assert torch.equal(out, want)


def test_a_reduce_scatter_output_just_before_its_input_is_pooled(ranks: list[Any]) -> None:
    # First-fit places a later input after an earlier output: apart, so pooled.
    world, numel = len(ranks), 4_096
    outs = [_pooled_empty(c, numel, torch.float32) for c in ranks]
    inputs = [_pooled(c, torch.full((world * numel,), float(r + 1))) for r, c in enumerate(ranks)]
    assert all(i.data_ptr() >= o.data_ptr() + 4 * numel for i, o in zip(inputs, outs, strict=True))
    before = _counts(ranks, "reduce_scatter")
    _reduce_scatter(ranks, inputs, outs)
    assert _counts(ranks, "reduce_scatter") == [b + 1 for b in before]
    assert all(torch.equal(o, torch.full((numel,), world * (world + 1) / 2)) for o in outs)


@pytest.mark.parametrize("root", [0, -1], ids=["root 0", "last rank root"])
def test_a_pooled_root_broadcasts_straight_from_its_pool(ranks: list[Any], root: int) -> None:
    world = len(ranks)
    root %= world
    values = torch.randn(700_000)  # 2.8 MB: three slot-sized chunks on the staged path
    tensors = [torch.zeros(700_000) for _ in range(world)]
    tensors[root] = _pooled(ranks[root], values)
    before = _counts(ranks, "broadcast")
    _broadcast(ranks, tensors, root)
    assert [a - b for a, b in zip(_counts(ranks, "broadcast"), before, strict=True)] == [1] * world
    assert all(torch.equal(t, values) for t in tensors)
    # Pooled receivers and a plain root: the staged path, the same bytes.
    tensors = [_pooled_empty(c, 700_000, torch.float32) for c in ranks]
    tensors[root] = values.clone()
    _broadcast(ranks, tensors, root)
    assert _counts(ranks, "broadcast") == [b + 1 for b in before]
    assert all(torch.equal(t, values) for t in tensors)


def test_one_plain_input_takes_every_rank_to_the_staged_gather_and_scatter(
    ranks: list[Any],
) -> None:
    world = len(ranks)
    numel = 300_000  # several chunks on the staged path
    inputs = [torch.randn(world * numel) for _ in range(world)]
    expected = torch.stack(inputs).sum(0)  # float32 sums in rank order (exact for 2 ranks only)
    pooled = [_pooled(c, i) for c, i in zip(ranks, inputs, strict=True)]
    pooled[-1] = inputs[-1].clone()
    outs = [torch.empty(numel) for _ in range(world)]
    before = {op: _counts(ranks, op) for op in ("all_gather", "reduce_scatter")}
    _reduce_scatter(ranks, pooled, outs)
    for r, out in enumerate(outs):
        torch.testing.assert_close(out, expected[r * numel : (r + 1) * numel])
    gathered = [torch.empty(world * world * numel) for _ in range(world)]
    _all_gather(ranks, pooled, gathered)
    assert all(torch.equal(g, torch.cat(inputs)) for g in gathered)
    assert {op: _counts(ranks, op) for op in before} == before  # nothing went between pools


def test_a_silent_peer_times_out_on_the_pooled_gather() -> None:
    ranks = _ranks(2)
    part = _pooled(ranks[0], torch.ones(1000))
    out = torch.empty(2000)
    fp32 = _code(torch.float32)
    with pytest.raises(RuntimeError, match=r"timed out after 0\.2.*rank 1 did not reach"):
        ranks[0].all_gather(part.data_ptr(), out.data_ptr(), 4000, fp32, True, 0.2)


def test_blocks_come_back_to_the_pool_and_free_ranges_merge() -> None:
    (owner,) = _ranks(1, pool=1 << 20)
    assert owner.pool_bytes == owner.pool_free_bytes == 1 << 20
    blocks = [owner.allocate(100_000) for _ in range(10)]  # 100,032 bytes each, aligned
    assert all(b is not None for b in blocks)
    assert owner.allocate(100_000) is None  # 1 MiB - 10 * 100,032 bytes left: too few
    offsets = [b.offset for b in blocks]
    assert offsets == sorted(offsets)
    assert all(o % 64 == 0 for o in offsets)
    del blocks[2:5]  # three neighbours back: one range that takes 300,000 bytes
    gc.collect()
    big = owner.allocate(300_000)
    assert big is not None
    assert big.offset == offsets[2]
    del blocks, big
    gc.collect()
    assert owner.pool_free_bytes == 1 << 20
    assert owner.allocate(1 << 20) is not None  # everything merged into one range again


def test_a_pooled_tensor_outlives_its_communicator() -> None:
    (owner,) = _ranks(1, pool=1 << 20)
    tensor = _pooled(owner, torch.arange(1000.0))
    del owner
    gc.collect()
    tensor += 1  # still mapped: the block holds the mapping
    assert torch.equal(tensor, torch.arange(1000.0) + 1)


def test_the_extension_refuses_bad_pool_requests() -> None:
    with pytest.raises(ValueError, match="pool_bytes must be a multiple of 4096"):
        _shm_comm.Communicator("", True, 0, 1, SLOT, 1, [os.getpid()], 1000)
    (owner,) = _ranks(1, pool=0)
    for nbytes in (0, -5):
        with pytest.raises(ValueError, match=f"nbytes must be > 0, got {nbytes}"):
            owner.allocate(nbytes)
    assert owner.allocate(64) is None  # no pool at all


@pytest.mark.parametrize(
    ("world", "pool"),
    [(2, 2**63 - 4096), (2, 2**46), (4096, 2**34), (1, 2**46 - 4096)],
)
def test_the_extension_refuses_a_segment_past_its_limit(world: int, pool: int) -> None:
    with pytest.raises(ValueError, match=f"would pass the limit of {2**46} bytes"):
        _shm_comm.Communicator.segment_bytes(world, SLOT, pool)
    with pytest.raises(ValueError, match="would pass the limit"):
        _shm_comm.Communicator("", True, 0, world, SLOT, 1, [os.getpid()] * world, pool)


def test_the_segment_size_adds_up() -> None:
    page = 4096
    size = _shm_comm.Communicator.segment_bytes(2, SLOT, 8 * page)
    assert size % page == 0
    assert 4 * SLOT + 2 * 9 * page <= size <= 4 * SLOT + 2 * 9 * page + 2 * page
    with pytest.raises(ValueError, match=r"world must be in \[1, "):
        _shm_comm.Communicator.segment_bytes(0, SLOT, page)


@pytest.mark.parametrize("raw", ["-4096", "1000", "lots", "1.5e9"])
def test_a_bad_pool_size_names_the_variable(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_segment.POOL_ENV, raw)
    with pytest.raises(ValueError, match=f"{_segment.POOL_ENV} must be .* got '{raw}'"):
        _segment.pool_bytes()


def test_the_pool_size_defaults_to_a_gibibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_segment.POOL_ENV, raising=False)
    assert _segment.pool_bytes() == 1 << 30
    monkeypatch.setenv(_segment.POOL_ENV, "0")
    assert _segment.pool_bytes() == 0


@pytest.mark.parametrize(
    ("size", "dtype", "error", "message"),
    [
        ("3", torch.float32, TypeError, "size must be an int or a sequence of ints, got '3'"),
        ([2, 1.5], torch.float32, TypeError, r"size must be .* got \[2, 1\.5\]"),
        (True, torch.float32, TypeError, "size must be .* got True"),
        ((4, -1), torch.float32, ValueError, r"negative dimension, got \(4, -1\)"),
        (4, "float32", TypeError, "dtype must be a torch.dtype, got 'float32'"),
        ((2**62, 4), torch.float32, ValueError,
         rf"size \(4611686018427387904, 4\) of torch.float32 needs {2**66} bytes: more than"),
        (2**61, torch.float64, ValueError, rf"needs {2**64} bytes: more than a tensor can hold"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("make", [shared_empty, try_shared_empty])
def test_shared_empty_names_a_bad_argument(
    size: object, dtype: object, error: type[Exception], message: str, make: Callable[..., object]
) -> None:
    with pytest.raises(error, match=message):
        make(size, dtype=dtype)


@pytest.mark.parametrize("make", [shared_empty, try_shared_empty])
def test_shared_empty_needs_a_process_group(make: Callable[..., object]) -> None:
    if torch.distributed.is_initialized():
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(RuntimeError, match=rf"{make.__name__}\(\) needs torch.distributed"):
        make(4)
