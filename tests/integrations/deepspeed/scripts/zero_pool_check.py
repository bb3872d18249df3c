"""ZeRO-1/2's flat gradient buckets in the "accel" group's pool, on 2 ranks.

    ACCEL_DEEPSPEED=1 torchrun --standalone --nproc-per-node 2 \
        tests/integrations/deepspeed/scripts/zero_pool_check.py OUT

DeepSpeed's own ``DeepSpeedZeroOptimizer.allreduce_bucket`` (wrapped by
accel.integrations.deepspeed.zero once DeepSpeed runs on accel) is called on a stand-in
holding the attributes it reads, with hypothesis-drawn buckets (the same draws on every
rank). Each rank writes ``OUT/rank<N>.json`` in the existing directory ``OUT`` (a file
each: the ranks share one stdout, where two long lines can interleave): the pooled
reduction's bits against the same call with ``ACCEL_ZERO_POOL=0`` and against gloo, what
was made in the pool, and what was left alone.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import accel.process_group  # registers "accel"
import accel.report
from accel.comm import _segment
from accel.integrations.deepspeed import _support, zero

same_everywhere = settings(
    derandomize=True, database=None, deadline=None, max_examples=25,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Owner:
    """What ``allreduce_bucket`` reads of its optimizer."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        from torch._utils import _flatten_dense_tensors

        self.flatten: Any = _flatten_dense_tensors  # as DeepSpeedZeroOptimizer binds it
        self.dp_process_group = group
        self.sequence_parallel_size = 1
        self.gradient_average = True


def bits(tensor: torch.Tensor) -> list[int]:
    return tensor.contiguous().view(-1).view(torch.uint8).tolist()


def main() -> None:
    out = Path(sys.argv[1])
    assert out.is_dir(), f"{out} is not a directory"
    import deepspeed  # DeepSpeed on accel: the hooks run on import
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    deepspeed.init_distributed(dist_backend="accel")  # allreduce_bucket asks deepspeed.comm
    rank = dist.get_rank()
    world = dist.get_world_size()
    accel_group = dist.new_group(backend="accel")
    gloo_group = dist.new_group(backend="gloo")
    shm = _segment.shm_group(accel_group, "zero_pool_check")
    assert shm is not None
    reduce = DeepSpeedZeroOptimizer.allreduce_bucket
    facts: dict[str, Any] = {"wrapped": getattr(reduce, "accel_pooled", False)}
    owner, gloo_owner = Owner(accel_group), Owner(gloo_group)

    def bucket(
        shapes: list[list[int]], dtype: torch.dtype, strided: bool, seed: int
    ) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed * 16 + rank)
        tensors = [torch.randn(*s, generator=generator).to(dtype) for s in shapes]
        if strided:  # the first tensor a transposed view: flatten copies it
            tensors[0] = torch.randn(*shapes[0][::-1], generator=generator).to(dtype).t()
        return tensors

    def call(who: Owner, tensors: list[torch.Tensor], pool: bool) -> torch.Tensor:
        os.environ[_support.ZERO_POOL_ENV] = "1" if pool else "0"
        try:
            return reduce(who, [t.clone() if t.is_contiguous() else t for t in tensors],
                          tensors[0].dtype)  # fmt: skip
        finally:
            os.environ.pop(_support.ZERO_POOL_ENV)

    mismatches: list[str] = []
    pooled_expected = pooled_seen = 0

    @given(
        shapes=st.lists(
            st.lists(st.integers(1, 96), min_size=2, max_size=2), min_size=1, max_size=5
        ),
        dtype=st.sampled_from(sorted(DTYPES)),
        strided=st.booleans(),
        seed=st.integers(0, 1000),
    )
    @same_everywhere
    def layouts(shapes: list[list[int]], dtype: str, strided: bool, seed: int) -> None:
        nonlocal pooled_expected, pooled_seen
        tensors = bucket(shapes, DTYPES[dtype], strided, seed)
        plain = call(owner, tensors, pool=False)
        before, calls = zero.COUNTS.pooled, shm.communicator.pooled_calls["all_reduce"]
        pooled = call(owner, tensors, pool=True)
        nbytes = sum(t.numel() for t in tensors) * tensors[0].element_size()
        eligible = (len(tensors) > 1 or strided) and nbytes >= 4096
        pooled_expected += eligible
        pooled_seen += zero.COUNTS.pooled - before
        if (zero.COUNTS.pooled - before) != eligible:
            mismatches.append(f"{shapes} {dtype} strided={strided}: pooled count off")
        if eligible and shm.communicator.pooled_calls["all_reduce"] - calls != 1:
            mismatches.append(f"{shapes} {dtype} strided={strided}: not reduced in the pool")
        gloo = call(gloo_owner, tensors, pool=True)
        if bits(pooled) != bits(plain) or bits(pooled) != bits(gloo):
            mismatches.append(f"{shapes} {dtype} strided={strided}: bits differ")

    layouts()
    facts["mismatches"] = mismatches
    facts["pooled_expected"], facts["pooled_seen"] = pooled_expected, pooled_seen

    # One contiguous tensor: flatten returns a view of it and the sums land in it, as
    # DeepSpeed's own path; nothing is made in the pool.
    one = torch.full((4096,), float(rank + 1))
    before = zero.COUNTS.pooled
    result = reduce(owner, [one], torch.float32)
    facts["one_tensor_in_place"] = (
        result.data_ptr() == one.data_ptr()
        and bool((one == sum(range(1, world + 1)) / world).all())
        and zero.COUNTS.pooled == before
    )

    # flatten outside allreduce_bucket (DeepSpeed's long-lived flat buffers): DeepSpeed's own.
    parts = [torch.ones(2048), torch.ones(2048)]
    before, free = zero.COUNTS.pooled, shm.communicator.pool_free_bytes
    flat = owner.flatten(parts)
    facts["flatten_elsewhere_untouched"] = (
        zero.COUNTS.pooled == before and shm.communicator.pool_free_bytes == free
    )
    del flat

    # Another flatten (ZenFlow's): left as it is, nothing pooled.
    zenflow = Owner(accel_group)
    zenflow.flatten = lambda tensors: torch.cat([t.reshape(-1) for t in tensors])
    own = zenflow.flatten
    before = zero.COUNTS.pooled
    reduce(zenflow, [torch.ones(2048), torch.ones(2048)], torch.float32)
    facts["other_flatten_untouched"] = zenflow.flatten is own and zero.COUNTS.pooled == before

    # A reduce to one rank (``rank`` given) runs on gloo: the bucket stays DeepSpeed's.
    before_pooled, before_plain = zero.COUNTS.pooled, zero.COUNTS.plain
    parts = [torch.full((2048,), float(rank + 1)) for _ in range(2)]
    reduced = reduce(owner, parts, torch.float32, rank=0)
    facts["reduce_plain"] = (
        zero.COUNTS.pooled == before_pooled and zero.COUNTS.plain == before_plain + 1
    )
    facts["reduce_result"] = rank != 0 or bool((reduced == 1.5).all())

    # A bucket reduced in another dtype (DeepSpeed reduces a converted copy): stays too.
    before_pooled = zero.COUNTS.pooled
    halves = [torch.full((4096,), float(rank + 1), dtype=torch.bfloat16) for _ in range(2)]
    converted = reduce(owner, halves, torch.float32)
    facts["other_dtype_plain"] = (
        zero.COUNTS.pooled == before_pooled
        and converted.dtype == torch.float32
        and bool((converted == 1.5).all())
    )

    # Gradients that require grad, with grad mode on: DeepSpeed's flatten (a cat with out=
    # takes no autograd).
    before_pooled = zero.COUNTS.pooled
    leaves = [torch.ones(2048, requires_grad=True) for _ in range(2)]
    reduce(owner, leaves, torch.float32)
    facts["autograd_plain"] = zero.COUNTS.pooled == before_pooled

    # An explicit process_group (MoE's expert groups): that group's pool and segment.
    expert_group = dist.new_group(backend="accel")
    expert = _segment.shm_group(expert_group, "zero_pool_check")
    assert expert is not None
    calls = expert.communicator.pooled_calls["all_reduce"]
    parts = [torch.ones(2048), torch.ones(2048)]
    reduce(owner, parts, torch.float32, process_group=expert_group)
    facts["explicit_group_pooled"] = expert.communicator.pooled_calls["all_reduce"] == calls + 1

    # One rank with the switch off: every rank takes the copying path, the same bits.
    tensors = bucket([[64, 64], [64, 64]], torch.float32, False, 7)
    plain = call(owner, tensors, pool=False)
    mixed = call(owner, tensors, pool=rank == 0)
    facts["mixed_switch_same_bits"] = bits(mixed) == bits(plain)
    del plain, mixed, reduced, converted

    # The blocks go back to the pool once the callers drop the results (and the group's
    # worker its last reduction: a collective after it waits for that).
    dist.barrier(group=accel_group)
    gc.collect()
    taken = shm.communicator.pool_bytes - shm.communicator.pool_free_bytes
    facts["pool_back"] = taken

    # A pool with no room: DeepSpeed's own flatten, with no warning.
    os.environ["ACCEL_SHM_POOL_BYTES"] = str(64 << 10)
    small_group = dist.new_group(backend="accel")
    small = _segment.shm_group(small_group, "zero_pool_check")
    del os.environ["ACCEL_SHM_POOL_BYTES"]
    assert small is not None
    # Rank 1's pool only is full: it keeps DeepSpeed's flatten, rank 0 pools, and every
    # rank takes the copying path for the call.
    hog = _segment.pooled_empty(small, (60 << 10,), torch.uint8) if rank == 1 else None
    before_pooled, before_plain = zero.COUNTS.pooled, zero.COUNTS.plain
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reduced = reduce(Owner(small_group), [torch.ones(4096), torch.ones(4096)], torch.float32)
    made_in_pool = zero.COUNTS.pooled == before_pooled + 1
    facts["full_pool_plain"] = (
        (not made_in_pool and zero.COUNTS.plain == before_plain + 1) if rank == 1 else made_in_pool
    ) and not caught
    facts["full_pool_result"] = bool((reduced == 1.0).all())
    del hog, reduced

    facts["report"] = accel.report.collect().collectives
    facts["rank"] = rank
    (out / f"rank{rank}.json").write_text(json.dumps(facts))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
