"""ZeRO-1/2's flat gradient buckets made in the "accel" group's pool
(:mod:`accel.integrations.deepspeed.zero`): the copying path's and gloo's bits, and nothing
else made there. (Training with them, against native DeepSpeed's losses: test_training.py's
two-rank test.)"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest

pytest.importorskip("deepspeed")

from accel.integrations.deepspeed import _support, zero
from tests.integrations.deepspeed.processes import (
    SCRIPTS,
    assert_no_jit,
    fresh_env,
    torchrun,
)
from tests.support.shm import left_behind, shm_names


@pytest.mark.slow  # starts 2 ranks
def test_flat_buckets_reduce_in_the_pool_with_the_copying_paths_bits(
    tmp_path: pathlib.Path,
) -> None:
    shm_before = shm_names()
    out = tmp_path / "facts"
    out.mkdir()
    env = fresh_env(tmp_path, ACCEL_DEEPSPEED="1")
    result = torchrun(SCRIPTS / "zero_pool_check.py", 2, env, str(out))
    assert result.returncode == 0, result.stderr[-4000:]
    every_rank: list[dict[str, Any]] = [
        json.loads(path.read_text()) for path in out.glob("rank*.json")
    ]
    assert sorted(facts["rank"] for facts in every_rank) == [0, 1]
    for facts in every_rank:
        assert facts["wrapped"] is True  # DeepSpeed on accel wraps allreduce_bucket on import
        # Every drawn bucket: the same bits with and without the pool, and as gloo's; each
        # one eligible made in the pool and reduced there, no other.
        assert facts["mismatches"] == []
        assert facts["pooled_seen"] == facts["pooled_expected"] > 0
        assert facts["one_tensor_in_place"] is True
        assert facts["flatten_elsewhere_untouched"] is True
        assert facts["other_flatten_untouched"] is True
        # Where the pool cannot pay, the bucket stays DeepSpeed's: a reduce to one rank, a
        # bucket reduced in another dtype, autograd; an expert group's bucket goes to its pool.
        assert facts["reduce_plain"] is True
        assert facts["reduce_result"] is True
        assert facts["other_dtype_plain"] is True
        assert facts["autograd_plain"] is True
        assert facts["explicit_group_pooled"] is True
        # Ranks that disagree (one rank's switch off, one rank's pool full): the copying
        # path for everyone, the same bits, no warning.
        assert facts["mixed_switch_same_bits"] is True
        assert facts["pool_back"] == 0
        assert facts["full_pool_plain"] is True
        assert facts["full_pool_result"] is True
        assert re.search(
            r"DeepSpeed ZeRO-1/2: [1-9][0-9]* flat gradient bucket\(s\) made in the pool",
            facts["report"],
        )
    assert not left_behind(shm_before)
    assert_no_jit(tmp_path)


def test_a_deepspeed_without_the_expected_method_is_an_error_naming_it() -> None:
    class Elsewhere:
        def allreduce_bucket(self, bucket: object, rank: int | None = None) -> None: ...

    expected = "must take communication_data_type, rank and process_group"
    with pytest.raises(TypeError, match=rf"Elsewhere\.allreduce_bucket {expected}"):
        zero.pool_flat_buckets(Elsewhere)
    with pytest.raises(TypeError, match=expected):
        zero.pool_flat_buckets(object)


def _optimizer_class() -> type:
    """A new class whose allreduce_bucket takes what DeepSpeed 0.19's does."""

    class Optimizer:
        def allreduce_bucket(
            self,
            bucket: object,
            communication_data_type: object,
            rank: int | None = None,
            process_group: object = None,
        ) -> object:
            return bucket

    return Optimizer


def test_a_bad_switch_value_is_an_error_when_the_class_is_wrapped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Optimizer = _optimizer_class()
    monkeypatch.setenv(_support.ZERO_POOL_ENV, "on")
    with pytest.raises(ValueError, match=f"{_support.ZERO_POOL_ENV} must be 0 or 1, got 'on'"):
        zero.pool_flat_buckets(Optimizer)


def test_wrapping_twice_wraps_once() -> None:
    Optimizer = _optimizer_class()
    zero.pool_flat_buckets(Optimizer)
    wrapped = Optimizer.allreduce_bucket
    zero.pool_flat_buckets(Optimizer)
    assert Optimizer.allreduce_bucket is wrapped
