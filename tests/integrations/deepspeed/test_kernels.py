"""The DeepSpeed-API kernels (kernels.py, comm_ops.py): the functions and signatures of
DeepSpeed's compiled modules on accel's prebuilt ones, against DeepSpeed's own formulas."""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

deepspeed = pytest.importorskip("deepspeed")


from accel.integrations.deepspeed import comm_ops, kernels, op_builders  # noqa: E402
from accel.ops import cpu_optim  # noqa: E402


# DeepSpeed's kernels, written out from its C++ scalar paths (csrc/includes/cpu_*.h), as
# the reference the DeepSpeed-API kernels are held to.
def ds_adam(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int,
            lr: float, b1: float, b2: float, eps: float, wd: float, adamw: bool) -> None:  # fmt: skip
    bc1 = 1 - b1**step
    bc2 = 1 / math.sqrt(1 - b2**step)
    if wd > 0 and not adamw:
        g = g + p * wd
    m.mul_(b1).add_(g * (1 - b1))
    v.mul_(b2).add_(g * g * (1 - b2))
    denom = v.sqrt() * bc2 + eps
    if wd > 0 and adamw:
        p.add_(p * (-lr * wd))
    p.add_((m / denom) * (-lr / bc1))


def ds_lion(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, lr: float, b1: float, b2: float,
            wd: float) -> None:  # fmt: skip
    direction = torch.sign(m * b1 + g * (1 - b1))
    if wd > 0:
        p.mul_(1 - lr * wd)
    p.add_(direction * -lr)
    m.mul_(b2).add_(g * (1 - b2))


def ds_adagrad(p: torch.Tensor, g: torch.Tensor, v: torch.Tensor, lr: float, eps: float,
               wd: float) -> None:  # fmt: skip
    if wd > 0:
        g = g + p * wd
    v.add_(g * g)
    p.add_(g / (v.sqrt() + eps) * -lr)


def _tensors(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    p, g = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    m, v = torch.randn(n, generator=gen) * 0.1, torch.rand(n, generator=gen) * 0.1
    return p, g, m, v


hyper = st.fixed_dictionaries({
    "n": st.integers(1, 3000), "step": st.integers(1, 50), "lr": st.floats(1e-4, 1e-1),
    "b1": st.floats(0.5, 0.99), "b2": st.floats(0.9, 0.9999), "wd": st.sampled_from([0.0, 0.01, 0.1]),
    "seed": st.integers(0, 2**16),
})  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(h=hyper, adamw=st.booleans())
def test_adam_update_matches_deepspeeds_formula(h: dict[str, Any], adamw: bool) -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(7, h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], adamw, False)
    p, g, m, v = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, m, v)]
    ops.adam_update(7, h["step"], h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], True, p, g, m, v)
    ds_adam(*expected, h["step"], h["lr"], h["b1"], h["b2"], 1e-8, h["wd"], adamw)
    for got, want in zip((p, m, v), (expected[0], expected[2], expected[3]), strict=True):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6)


@settings(max_examples=30, deadline=None)
@given(h=hyper)
def test_lion_update_matches_deepspeeds_formula(h: dict[str, Any]) -> None:
    ops = kernels.CPULionKernels()
    ops.create_lion(3, h["lr"], h["b1"], h["b2"], h["wd"], False)
    p, g, m, _ = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, m)]
    ops.lion_update(3, h["step"], h["lr"], h["b1"], h["b2"], h["wd"], p, g, m)
    ds_lion(*expected, h["lr"], h["b1"], h["b2"], h["wd"])
    torch.testing.assert_close(p, expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m, expected[2], rtol=1e-5, atol=1e-6)


def test_lion_leaves_an_element_without_direction_to_weight_decay() -> None:
    # A zero gradient with a zero moment (a dead ReLU's weights): sign(0) = 0, as torch's
    # sign and the Lion paper; DeepSpeed's kernels take copysign, a full lr step
    # (docs/deepspeed.md says so).
    ops = kernels.CPULionKernels()
    ops.create_lion(4, 0.1, 0.9, 0.99, 0.0, False)
    p, g, m = torch.ones(4), torch.tensor([0.0, -0.0, 1.0, -1.0]), torch.zeros(4)
    ops.lion_update(4, 1, 0.1, 0.9, 0.99, 0.0, p, g, m)
    assert p.tolist() == pytest.approx([1.0, 1.0, 0.9, 1.1])


@settings(max_examples=30, deadline=None)
@given(h=hyper)
def test_adagrad_update_matches_deepspeeds_formula(h: dict[str, Any]) -> None:
    ops = kernels.CPUAdagradKernels()
    ops.create_adagrad(5, h["lr"], 1e-8, h["wd"], False)
    p, g, _, v = _tensors(h["n"], h["seed"])
    expected = [t.clone() for t in (p, g, v)]
    ops.adagrad_update(5, h["step"], h["lr"], 1e-8, h["wd"], p, g, v)
    ds_adagrad(*expected, h["lr"], 1e-8, h["wd"])
    torch.testing.assert_close(p, expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v, expected[2], rtol=1e-5, atol=1e-6)


def test_adam_rollback_undoes_an_adamw_step() -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = _tensors(1000, 0)
    before = [t.clone() for t in (p, m, v)]
    ops.adam_update(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    assert not torch.equal(p, before[0])
    ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    for got, want in zip((p, m, v), before, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(
        TypeError, match=r"params must be float32, bfloat16 or float16, got torch\.float64"
    ):
        ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p.double(), g, m, v)


def test_adam_rollback_of_mismatched_tensors_changes_nothing() -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = _tensors(1000, 0)
    before = [t.clone() for t in (p, m, v)]
    with pytest.raises(ValueError, match=r"grads must have params' shape \(1000,\), got \(999,\)"):
        ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g[:999], m, v)
    with pytest.raises(ValueError, match=r"exp_avg_sq must have params' shape"):
        ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v.view(10, 100))
    for got, want in zip((p, m, v), before, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adam_rollback_undoes_a_half_precision_step_up_to_its_rounding(dtype: torch.dtype) -> None:
    # DeepSpeed's kernel leaves half-precision tensors untouched and returns -1 (while
    # DeepSpeedCPUAdam counts the step as undone); accel undoes it through float32 copies.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = (t.to(dtype) for t in _tensors(1000, 1))
    before = [t.clone() for t in (p, m, v)]
    ops.adam_update(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    moved = (p.float() - before[0].float()).abs().max()
    assert moved > 0
    assert ops.adam_rollback(1, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v) == 0
    assert all(t.dtype == dtype for t in (p, m, v))
    # Back to within a few rounding steps of where it was, far closer than the step moved it.
    assert (p.float() - before[0].float()).abs().max() < moved / 4
    for got, want in zip((m, v), before[1:], strict=True):
        torch.testing.assert_close(got.float(), want.float(), rtol=0.05, atol=1e-3)


def test_fused_adam_equals_one_tensor_at_a_time() -> None:
    tensors = [_tensors(n, n) for n in (5, 300, 4097)]
    fused = [[t.clone() for t in group] for group in tensors]
    single = kernels.CPUAdamKernels()
    single.create_adam(2, 1e-3, 0.9, 0.999, 1e-8, 0.1, True, False)
    for p, g, m, v in tensors:
        single.adam_update(2, 4, 1e-3, 0.9, 0.999, 1e-8, 0.1, True, p, g, m, v)
    lists = [[group[i] for group in fused] for i in (1, 0, 2, 3)]  # grads, params, m, v
    kernels.FusedAdamKernels().multi_tensor_adam(
        2048, torch.zeros(1), lists, 1e-3, 0.9, 0.999, 1e-8, 4, 1, 1, 0.1
    )
    for want, got in zip(tensors, fused, strict=True):
        for a, b in zip(want, got, strict=True):
            assert torch.equal(a, b)


def test_fused_lion_steps_every_tensor() -> None:
    p, g, m, _ = _tensors(100, 1)
    expected = [t.clone() for t in (p, g, m)]
    kernels.FusedLionKernels().multi_tensor_lion(
        2048, torch.zeros(1), [[g], [p], [m]], 1e-3, 0.9, 0.99, 1, 0.0
    )
    ds_lion(*expected, 1e-3, 0.9, 0.99, 0.0)
    torch.testing.assert_close(p, expected[0])
    with pytest.raises(ValueError, match="tensor_lists must hold 3"):
        kernels.FusedLionKernels().multi_tensor_lion(
            2048, torch.zeros(1), [[g], [p]], 1e-3, 0.9, 0.99, 1, 0.0
        )
    with pytest.raises(ValueError, match="mode must be 0"):
        kernels.FusedAdamKernels().multi_tensor_adam(
            2048, torch.zeros(1), [[g], [p], [m], [m]], 1e-3, 0.9, 0.999, 1e-8, 1, 2, 1, 0.0
        )


def test_non_contiguous_and_bf16_state_tensors_are_updated_in_place() -> None:
    # DeepSpeed's C++ updates .contiguous() copies of such tensors and loses the update.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(4, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    base = torch.randn(8, 6)
    p = base.t()  # non-contiguous view
    g, m, v = torch.randn(6, 8), torch.zeros(6, 8, dtype=torch.bfloat16), torch.zeros(6, 8)
    before = p.clone()
    ops.adam_update(4, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    assert not torch.equal(base.t(), before)
    assert m.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_states_give_the_bits_of_float32_copies_rounded(dtype: torch.dtype) -> None:
    # DeepSpeed's fp32_optimizer_states=False: per-tensor adam_update and a multi-tensor
    # call step 16-bit states in the kernel; both must give the bits of stepping float32
    # copies of the states and rounding them back.
    gen = torch.Generator().manual_seed(3)
    shapes = [(4097,), (33, 7), (5,)]

    def tensors() -> list[list[torch.Tensor]]:
        params = [torch.randn(shape, generator=gen).to(dtype) for shape in shapes]
        grads = [torch.randn(shape, generator=gen).to(dtype) for shape in shapes]
        m = [(torch.randn(shape, generator=gen) * 0.1).to(dtype) for shape in shapes]
        v = [(torch.rand(shape, generator=gen) * 0.1).to(dtype) for shape in shapes]
        return [params, grads, m, v]

    per_tensor = tensors()
    fused = [[t.clone() for t in column] for column in per_tensor]
    expected = [[t.clone() for t in column] for column in per_tensor]
    for p, g, m, v in zip(*expected, strict=True):
        wide_m, wide_v = m.float(), v.float()
        cpu_optim.adam_step([p], [g], [wide_m], [wide_v], [3], lr=1e-2, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01, adamw=True)  # fmt: skip
        m.copy_(wide_m)
        v.copy_(wide_v)
    ops = kernels.CPUAdamKernels()
    ops.create_adam(5, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    for p, g, m, v in zip(*per_tensor, strict=True):
        ops.adam_update(5, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, p, g, m, v)
    params, grads, m, v = fused
    kernels.FusedAdamKernels().multi_tensor_adam(
        2048, torch.zeros(1), [grads, params, m, v], 1e-2, 0.9, 0.999, 1e-8, 3, 1, 1, 0.01
    )
    for result in (per_tensor, fused):
        for want_column, got_column in zip(expected, result, strict=True):
            for want, got in zip(want_column, got_column, strict=True):
                assert got.dtype == want.dtype
                assert torch.equal(got, want)


def test_a_bad_tensor_with_16_bit_states_changes_nothing() -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(6, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    p, m, v = (
        torch.randn(3000),
        torch.zeros(3000, dtype=torch.bfloat16),
        torch.zeros(3000).bfloat16(),
    )
    before = [t.clone() for t in (p, m, v)]
    with pytest.raises(ValueError, match="grads"):  # a gradient of another shape
        ops.adam_update(6, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, torch.randn(1500, 2), m, v)
    for want, got in zip(before, (p, m, v), strict=True):
        assert torch.equal(got, want)


def test_tensors_that_share_memory_are_refused_before_any_changes() -> None:
    # Copies hide sharing from the kernel's own overlap check: an expanded parameter
    # advanced its moments and then failed the copy back; two views of one storage were
    # stepped as two parameters, the last copy back winning.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(7, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    expanded = torch.randn(1, 8).expand(4, 8)
    g, m, v = torch.randn(4, 8), torch.zeros(4, 8), torch.zeros(4, 8)
    with pytest.raises(ValueError, match=r"params\[0\] has elements that share memory"):
        ops.adam_update(7, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, expanded, g, m, v)
    assert not m.any()
    assert not v.any()
    with pytest.raises(ValueError, match=r"exp_avg\[0\] has elements that share memory"):
        ops.adam_update(7, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, g.clone(), g, m[:1].expand(4, 8), v)  # fmt: skip

    weight = torch.randn(6, 6)
    before = weight.clone()
    grads = [torch.randn(6, 6) for _ in range(2)]
    exp_avgs, exp_avg_sqs = [torch.zeros(6, 6) for _ in range(2)], [torch.zeros(6, 6) for _ in range(2)]  # fmt: skip
    with pytest.raises(ValueError, match=r"params\[0\] and params\[1\] overlap in memory"):
        kernels.FusedAdamKernels().multi_tensor_adam(
            2048, torch.zeros(1), [grads, [weight.t(), weight.t()], exp_avgs, exp_avg_sqs],
            1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0,
        )  # fmt: skip
    assert not any(t.any() for t in (*exp_avgs, *exp_avg_sqs))
    with pytest.raises(ValueError, match=r"params\[0\] and exp_avg\[0\] overlap in memory"):
        ops.adam_update(7, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, weight.t(), grads[0], weight, exp_avg_sqs[0])  # fmt: skip
    assert torch.equal(weight, before)


def test_what_the_copies_would_hide_is_refused_on_the_callers_tensors() -> None:
    # Checked before the copies are made: past them, a meta tensor was called overlapping,
    # a non-contiguous view past its storage's end was read and written beyond it (heap
    # corruption), and an inference state was stepped and then refused the copy back.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(10, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    meta = [torch.zeros(4, device="meta") for _ in range(4)]
    with pytest.raises(ValueError, match=r"params\[0\] must be on the CPU, got meta"):
        ops.adam_update(10, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, *meta)
    p, g, m, v = _tensors(4, 0)
    with pytest.raises(
        ValueError, match=r"grads\[0\] must be a dense tensor, got layout torch\.sparse_coo"
    ):
        ops.adam_update(10, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, g.to_sparse(), m, v)
    shrunk = torch.zeros(8, 8).t()
    shrunk.untyped_storage().resize_(16)
    with pytest.raises(
        ValueError, match=r"exp_avg\[0\] reaches byte 256 of its storage, which holds 16"
    ):
        ops.adam_update(10, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, torch.randn(8, 8), torch.randn(8, 8), shrunk, torch.zeros(8, 8))  # fmt: skip
    with torch.inference_mode():
        inference = torch.zeros(8, 8).t()
    params = torch.randn(8, 8)
    before = params.clone()
    with pytest.raises(ValueError, match=r"exp_avg_sq\[0\] is an inference tensor"):
        ops.adam_update(10, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, params, torch.randn(8, 8), torch.zeros(8, 8), inference)  # fmt: skip
    assert torch.equal(params, before)


def test_a_leaf_that_requires_grad_gets_its_step_and_grads_may_share_memory() -> None:
    # The copy back into a non-contiguous leaf raised after its moments had moved; two
    # parameters reading one (expanded) gradient are fine: nothing writes it.
    ops = kernels.CPUAdamKernels()
    ops.create_adam(11, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    param = torch.randn(8, 6).t().requires_grad_()  # a non-contiguous leaf
    before = param.detach().clone()
    ops.adam_update(11, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, param, torch.ones(6, 8), torch.zeros(6, 8), torch.zeros(6, 8))  # fmt: skip
    assert not torch.equal(param.detach(), before)
    shared = torch.ones(3)
    grads = [shared.expand(2, 3), shared.expand(2, 3)]  # each read through a copy
    params = [torch.zeros(2, 3), torch.zeros(2, 3)]
    kernels.FusedAdamKernels().multi_tensor_adam(
        2048, torch.zeros(1), [grads, params, [torch.zeros(2, 3) for _ in range(2)], [torch.zeros(2, 3) for _ in range(2)]],
        1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0,
    )  # fmt: skip
    assert torch.equal(params[0], params[1])
    assert bool((params[0] < 0).all())


def test_integer_states_are_refused_not_truncated() -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(8, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    p, g, _, v = _tensors(8, 0)
    with pytest.raises(
        TypeError, match=r"exp_avg\[0\] must be a floating-point tensor, got torch\.int32"
    ):
        ops.adam_update(8, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, g, torch.zeros(8, dtype=torch.int32), v)  # fmt: skip


def test_switches_take_true_false_1_or_0_only() -> None:
    ops = kernels.CPUAdamKernels()
    with pytest.raises(
        ValueError, match=r"adamw_mode must be True or False \(or 1 or 0\), got 'no'"
    ):
        ops.create_adam(9, 1e-2, 0.9, 0.999, 1e-8, 0.0, "no", False)  # type: ignore[arg-type]
    ops.create_adam(9, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1, False)  # type: ignore[arg-type]
    ops.create_adam(12, 1e-2, 0.9, 0.999, 1e-8, 0.0, np.True_, False)  # type: ignore[arg-type]
    p, g, m, v = _tensors(8, 0)
    before = p.clone()
    with pytest.raises(
        ValueError, match=r"bias_correction must be True or False \(or 1 or 0\), got 2"
    ):
        ops.adam_update(9, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, 2, p, g, m, v)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"bias_correction must be True or False \(or 1 or 0\), got 2"
    ):
        # DeepSpeed's CUDA kernel corrects the bias only for 1: 2 must not pass for "yes"
        kernels.FusedAdamKernels().multi_tensor_adam(
            2048, torch.zeros(1), [[g], [p], [m], [v]], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 2, 0.0
        )
    assert torch.equal(p, before)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"beta1": 0.0}, r"beta1 and beta2 must be > 0 to undo a step"),
        ({"beta2": 1.0}, r"beta2 must be in \[0, 1\), got 1\.0"),
        ({"lr": -1e-3}, r"lr must be a finite number >= 0"),
        ({"lr": 0.5, "weight_decay": 2.0}, r"lr \* weight_decay is 1"),
        ({"epsilon": 0.0}, r"eps must be a finite number > 0"),
        ({"step": 2.5}, r"step must be a whole number >= 1, got 2\.5"),
        ({"step": 0}, r"step must be >= 1 \(the step being taken\)"),
    ],
)
def test_adam_rollback_refuses_a_step_it_cannot_undo(change: dict[str, Any], message: str) -> None:
    ops = kernels.CPUAdamKernels()
    ops.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, False)
    p, g, m, v = _tensors(100, 0)
    before = [t.clone() for t in (p, m, v)]
    args = {"step": 3, "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.01} | change  # fmt: skip
    with pytest.raises((ValueError, TypeError), match=message):
        ops.adam_rollback(
            1, **args, bias_correction=True, params=p, grads=g, exp_avg=m, exp_avg_sq=v
        )
    for got, want in zip((p, m, v), before, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (-5, r"^step must be >= 1 \(the step being taken\) and below 2\*\*63, got -5$"),
        (0, r"^step must be >= 1 \(the step being taken\) and below 2\*\*63, got 0$"),
        (None, r"^step must be a whole number >= 1, got None$"),
        ("x", r"^step must be a whole number >= 1, got 'x'$"),
        (2.5, r"^step must be a whole number >= 1, got 2\.5$"),
    ],
)
@pytest.mark.parametrize("function", ["lion_update", "multi_tensor_lion"])
def test_lion_functions_check_their_step_as_adam_update_does(
    function: str, step: object, message: str
) -> None:
    # Lion does not use the step's number, but took any value without a word.
    p, g, m, _ = _tensors(8, 0)
    before = [t.clone() for t in (p, g, m)]
    ops = kernels.CPULionKernels()
    ops.create_lion(0, 1e-3, 0.9, 0.99, 0.0, False)

    def call(step: Any) -> None:
        if function == "lion_update":
            ops.lion_update(0, step, 1e-3, 0.9, 0.99, 0.0, p, g, m)
        else:
            fused = kernels.FusedLionKernels()
            fused.multi_tensor_lion(
                2048, torch.zeros(1), [[g], [p], [m]], 1e-3, 0.9, 0.99, step, 0.0
            )

    with pytest.raises(ValueError, match=message):
        call(step)
    for got, want in zip((p, g, m), before, strict=True):
        assert torch.equal(got, want)
    call(np.int64(3))  # a whole number of any integer type steps
    assert not torch.equal(p, before[0])


def test_unknown_optimizer_id_and_bad_hyperparameters_raise() -> None:
    ops = kernels.CPUAdamKernels()
    p, g, m, v = _tensors(4, 0)
    with pytest.raises(KeyError, match="no adam optimizer with id 99"):
        ops.adam_update(99, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    with pytest.raises(ValueError, match="betas"):
        ops.create_adam(1, 1e-3, 1.5, 0.999, 1e-8, 0.0, True, False)
    ops.create_adam(1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False)
    ops.destroy_adam(1)
    with pytest.raises(KeyError):
        ops.adam_update(1, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)
    with pytest.raises(ValueError, match=r"lr \(alpha\) must be a finite number >= 0"):
        kernels.CPULionKernels().create_lion(1, -1.0, 0.9, 0.99, 0.0, False)
    ops.create_adam(2, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False)
    for wrong in ("2", 2.0, 2.7, True):  # int() made each of them an id
        with pytest.raises(TypeError, match="optimizer_id must be an int, got"):
            ops.adam_update(wrong, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)  # type: ignore[arg-type]
    ops.adam_update(np.int64(2), 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, p, g, m, v)  # type: ignore[arg-type]


def test_shm_comm_module_checks_its_arguments() -> None:
    shm = op_builders.ShareMemCommBuilder().load()
    assert shm.vector_kernel_level() == 2
    shm.initialize(2, 1)
    with pytest.raises(ValueError, match="rank must be an integer in \\[0, 2\\)"):
        shm.initialize(2, 2)
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        shm.initialize(0, 0)
    assert comm_ops.register_ops() in ("accel", "deepspeed")
    assert hasattr(torch.ops.deepspeed, "inference_all_reduce_")


def test_functions_accel_lacks_come_from_deepspeeds_own_module() -> None:
    loads: list[int] = []

    def native() -> Any:
        loads.append(1)
        return types.SimpleNamespace(adam_newer=lambda *args: ("native", args))

    # A function a newer DeepSpeed declares and accel does not implement yet.
    ops = kernels.CPUAdamKernels(native, lambda: frozenset({"adam_newer"}))
    assert ops.adam_newer(1, 2) == ("native", (1, 2))
    assert ops.adam_newer(3) == ("native", (3,))
    assert loads == [1]  # loaded once, on first need
    with pytest.raises(AttributeError, match="adam_newer"):
        kernels.CPUAdamKernels().adam_newer  # noqa: B018


def test_functions_accel_lacks_are_found_without_building_and_loaded_on_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `hasattr(op, name)` for a function accel lacks must not load DeepSpeed's module (a
    # JIT build of minutes): the name is looked up in DeepSpeed's binding source; only a
    # call loads DeepSpeed's build, and says so.
    built: list[str] = []
    native = types.SimpleNamespace(adam_newer_size=lambda: 64)

    def build() -> Any:
        built.append("cpu_adam")
        return native

    module = kernels.CPUAdamKernels(build, lambda: frozenset({"adam_newer_size"}))
    assert hasattr(module, "adam_newer_size")
    assert not hasattr(module, "no_such_function")
    assert built == []
    with caplog.at_level("WARNING", logger="accel"):
        assert module.adam_newer_size() == 64
    assert built == ["cpu_adam"]
    assert "may JIT-compile" in caplog.text
    with pytest.raises(RuntimeError, match="CPUAdamKernels has no DeepSpeed counterpart"):
        kernels.CPUAdamKernels().deepspeed_native()


def test_deepspeeds_declared_functions_are_read_from_its_sources() -> None:
    names = op_builders._native_names("CPUAdamBuilder")
    assert {"adam_update", "create_adam", "zenflow_adam_create"} <= names


def test_accel_implements_every_function_deepspeeds_modules_declare() -> None:
    # What DeepSpeed 0.19.8's binding sources declare (m.def) for the modules accel
    # serves: none of them may fall back to DeepSpeed's JIT build.
    modules = {
        "CPUAdamBuilder": kernels.CPUAdamKernels(), "CPUAdagradBuilder": kernels.CPUAdagradKernels(),
        "CPULionBuilder": kernels.CPULionKernels(), "FusedAdamBuilder": kernels.FusedAdamKernels(),
    }  # fmt: skip
    for builder, module in modules.items():
        declared = op_builders._native_names(builder)
        assert declared, builder
        missing = sorted(name for name in declared if name not in dir(module))
        assert missing == [], f"{builder}: {missing}"
    assert op_builders._native_names("NoSuchBuilder") == frozenset()


def test_gradients_are_only_read_so_they_may_share_memory_or_be_inference_tensors() -> None:
    # docs/deepspeed.md promises it; one gradient for two parameters was refused ("grads[0]
    # and grads[1] overlap"), and so was a gradient made under torch.inference_mode().
    grad = torch.randn(6, 6)
    weights = [torch.randn(6, 6) for _ in range(2)]
    apart = [w.clone() for w in weights]
    for params, grads in ((weights, [grad, grad]), (apart, [grad.clone(), grad.clone()])):
        exp_avgs, exp_avg_sqs = [torch.zeros(6, 6) for _ in range(2)], [torch.zeros(6, 6) for _ in range(2)]  # fmt: skip
        kernels.FusedAdamKernels().multi_tensor_adam(
            2048, torch.zeros(1), [grads, params, exp_avgs, exp_avg_sqs],
            1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0,
        )  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(weights, apart, strict=True))
    ops = kernels.CPUAdamKernels()
    ops.create_adam(11, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, False)
    p, g, m, v = _tensors(8, 0)
    with torch.inference_mode():
        frozen = g.clone()
    expected = p.clone()
    ops.adam_update(11, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, expected, g, m.clone(), v.clone())
    ops.adam_update(11, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, p, frozen, m, v)
    assert torch.equal(p, expected)
