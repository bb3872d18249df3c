"""CPU optimizers against torch's reference implementations.

Error bound: with fp32 parameters our kernels perform torch's single-tensor operations in
the same order; only FMA contraction differs, which moves a result by a few ulp per step.
After up to 4 steps of random hyper-parameters we assert |ours - torch| <= 1e-5 + 1e-5*|x|
(observed: ~1e-7). With bf16/fp16 parameters both sides compute in fp32 and round to the
parameter's dtype once per step. Two fp32 results a few ulp apart can fall on either side
of a rounding boundary, so the parameters can part by one unit in the last place of their
dtype per step, and the next step starts from there. A unit is measured at the largest
magnitude the parameter reached (an error made while |p| was large stays when p shrinks),
so after k steps we assert |ours - ref| <= k * u * max|p| with u = 2**-8 (bf16) or
2**-11 (fp16), the dtype's unit roundoff times two. Observed: up to 4 fp16 units at the
final magnitude, within this bound.
"""

from __future__ import annotations

import copy
import math
import multiprocessing
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from accel.ops import cpu_optim
from accel.optim import CPUAdagrad, CPUAdam, CPULion
from accel.optim._base import CPUOptimizer
from tests.support.strategies import sizes

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


settings_kwargs: dict[str, Any] = {}


UNIT = {torch.bfloat16: 2**-7, torch.float16: 2**-10}  # one ulp relative to the binade


def _tolerance(dtype: torch.dtype, steps: int, largest: float) -> dict[str, float]:
    if dtype in UNIT:
        return {"rtol": 0.0, "atol": steps * UNIT[dtype] * max(largest, 2**-14)}
    return {"rtol": 1e-5, "atol": 1e-5}


class ReferenceLion(torch.optim.Optimizer):
    """Lion in plain torch (fp32), for comparison.

    Lion steps by the sign of ``beta1 * m + (1 - beta1) * g``; where that sum is within
    rounding of zero (it can be exactly zero in exact arithmetic: bfloat16 gradients make
    such ties common), the sign depends on the order of the roundings (fused multiply-add
    or not), and two correct implementations step ``lr`` or ``2 * lr`` apart. The
    reference counts such steps per element (:meth:`sign_slack`)."""

    def __init__(
        self, params: Any, lr: float, betas: tuple[float, float], weight_decay: float
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    def sign_slack(self, p: torch.Tensor) -> torch.Tensor:
        """How far, per element, a correct Lion may be from this one after its steps:
        ``2 * lr`` for each step whose sign was within rounding of zero."""
        ties = self.state[p].get("ties")
        return torch.zeros_like(p) if ties is None else 2 * self.param_groups[0]["lr"] * ties

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = m * beta1 + (1 - beta1) * p.grad
                # A few roundings of the two terms' size: the sign could go either way.
                scale = (m * beta1).abs() + ((1 - beta1) * p.grad).abs()
                tie = update.abs() <= 8 * torch.finfo(torch.float32).eps * scale
                state["ties"] = state.get("ties", torch.zeros_like(p)) + tie
                p.add_(torch.sign(update), alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


class ReferenceAdagrad(torch.optim.Adagrad):
    """torch's Adagrad, counting per element the steps whose weight-decayed gradient
    ``g + weight_decay * p`` was within rounding of zero.

    Where the two terms cancel (bfloat16 values make exact cancellation common: 0.15625 and
    0.1 * -1.5625), the sum is zero with one rounding of the product and ~1e-9 with a fused
    multiply-add; the step ``lr * g / (sqrt(state_sum) + eps)`` is then anything from 0 to
    ``lr`` on a first step. Two correct implementations part by up to ``2 * lr`` there."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        ties = _cancellations(self)
        super().step()  # makes the state on the first step: the counts go in after it
        for p, count in ties.items():
            self.state[p]["ties"] = count

    def sign_slack(self, p: torch.Tensor) -> torch.Tensor:
        """How far, per element, a correct Adagrad may be from this one: ``2 * lr`` for each
        step whose weight-decayed gradient cancelled."""
        ties = self.state[p].get("ties")
        return torch.zeros_like(p) if ties is None else 2 * self.param_groups[0]["lr"] * ties


MAX_STEPS = 4  # the most steps a drawn example takes


class ReferenceAdam(torch.optim.Adam):
    """torch's Adam (L2 weight decay, ``g + weight_decay * p``), counting per element the
    steps whose weight-decayed gradient was within rounding of zero, as ReferenceAdagrad
    does: there the step ``lr * m / (sqrt(v) + eps)`` swings between its extremes with the
    last bit of the sum (fused multiply-add or not), so two correct implementations part by
    up to twice the largest step there."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        ties = _cancellations(self)
        super().step()
        for p, count in ties.items():
            self.state[p]["ties"] = count

    def sign_slack(self, p: torch.Tensor) -> torch.Tensor:
        """How far, per element, a correct Adam may be from this one: twice the largest
        step for each step whose weight-decayed gradient cancelled. Over at most
        ``MAX_STEPS`` steps, |m| / sqrt(v) <= (1 - beta1) / sqrt(1 - beta2) * sqrt(sum over
        k < MAX_STEPS of max(1, beta1^2 / beta2)^k) (Cauchy-Schwarz), and bias correction
        divides it by at most 1 - beta1."""
        ties = self.state[p].get("ties")
        if ties is None:
            return torch.zeros_like(p)
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        growth = sum(max(1.0, beta1 * beta1 / beta2) ** k for k in range(MAX_STEPS))
        largest = math.sqrt(growth / (1 - beta2))
        return 2 * group["lr"] * largest * ties


def _cancellations(optimizer: torch.optim.Optimizer) -> dict[torch.Tensor, torch.Tensor]:
    """Per parameter, the tie counts so far plus the elements whose ``g + weight_decay * p``
    is within a few roundings of zero on this step."""
    ties = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            decay, grad = group["weight_decay"] * p.double(), p.grad.double()
            cancelled = (grad + decay).abs() <= 8 * torch.finfo(torch.float32).eps * (
                grad.abs() + decay.abs()
            )
            ties[p] = optimizer.state[p].get("ties", torch.zeros_like(p)) + cancelled
    return ties


def _run_against_reference(
    make_ours: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    make_ref: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    size: int,
    param_dtype: torch.dtype,
    grad_dtype: torch.dtype,
    steps: int,
    seed: int,
) -> None:
    generator = torch.Generator().manual_seed(seed)
    start = torch.randn(size, generator=generator).to(param_dtype)
    ours_param = start.clone().requires_grad_()
    ref_param = start.to(torch.float32, copy=True).requires_grad_()  # reference: fp32
    if grad_dtype != param_dtype and hasattr(ours_param, "grad_dtype"):
        ours_param.grad_dtype = None  # torch >= 2.10 checks .grad's dtype unless told not to
    ours, ref = make_ours([ours_param]), make_ref([ref_param])
    largest = float(start.float().abs().max()) if size else 0.0
    for _ in range(steps):
        grad = torch.randn(size, generator=generator).to(grad_dtype)
        ours_param.grad = grad.clone()
        ref_param.grad = grad.float()
        ours.step()
        ref.step()
        with torch.no_grad():  # the reference rounds to the parameter's dtype too
            ref_param.copy_(ref_param.to(param_dtype).float())
        largest = max(largest, float(ref_param.detach().abs().max()) if size else 0.0)
    tolerance = _tolerance(param_dtype, steps, largest)
    got, want = ours_param.detach().float(), ref_param.detach()
    if isinstance(ref, ReferenceLion | ReferenceAdagrad | ReferenceAdam):  # ties: a step more
        slack = ref.sign_slack(ref_param)
        tied = slack > 0
        excess = (got[tied] - want[tied]).abs() - slack[tied] - tolerance["atol"]
        assert bool((excess <= tolerance["rtol"] * want[tied].abs()).all()), excess.max()
        got, want = got[~tied], want[~tied]
    torch.testing.assert_close(got, want, **tolerance)


hyper = {
    "lr": st.floats(1e-4, 0.5),
    "beta1": st.floats(0.0, 0.99),
    "beta2": st.floats(0.5, 0.9999),
    "eps": st.floats(1e-8, 1e-2),
    "weight_decay": st.sampled_from([0.0, 1e-4, 0.1]),
}


@given(
    size=sizes, param_dtype=st.sampled_from(DTYPES), grad_dtype=st.sampled_from(DTYPES),
    adamw=st.booleans(), bias_correction=st.booleans(), steps=st.integers(1, MAX_STEPS),
    seed=st.integers(0, 2**31), **hyper,
)  # fmt: skip
@example(  # gradient and L2 weight decay cancel in one element (see ReferenceAdam); found at
    # the baseline kernel level, where the sum is not a fused multiply-add
    size=1000, param_dtype=torch.bfloat16, grad_dtype=torch.bfloat16, adamw=False,
    bias_correction=False, steps=1, seed=2, lr=0.5, beta1=0.0, beta2=0.5, eps=1e-8,
    weight_decay=0.1,
)  # fmt: skip
def test_adam_matches_torch(
    size: int, param_dtype: torch.dtype, grad_dtype: torch.dtype, adamw: bool,
    bias_correction: bool, steps: int, seed: int, lr: float, beta1: float, beta2: float,
    eps: float, weight_decay: float,
) -> None:  # fmt: skip
    def ref(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        cls = torch.optim.AdamW if adamw else ReferenceAdam
        optimizer = cls(
            params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay, foreach=False
        )
        if not bias_correction:  # torch has no switch: emulate with huge step counts
            optimizer.step = _without_bias_correction(optimizer)  # type: ignore[method-assign]
        return optimizer

    _run_against_reference(
        lambda p: CPUAdam(p, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                          adamw_mode=adamw, bias_correction=bias_correction),
        ref, size, param_dtype, grad_dtype, steps, seed,
    )  # fmt: skip


def _without_bias_correction(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    # beta**step underflows to 0 for step = 10**6, which makes both corrections exactly 1.
    original = optimizer.step

    def step() -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state[p]
                if state and float(state["step"]) < 10**6:
                    state["step"] = torch.tensor(float(10**6))
                elif not state:
                    state["step"] = torch.tensor(float(10**6) - 1)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        original()

    return step


@given(
    size=sizes, param_dtype=st.sampled_from(DTYPES), grad_dtype=st.sampled_from(DTYPES),
    steps=st.integers(1, MAX_STEPS), seed=st.integers(0, 2**31), lr=hyper["lr"],
    lr_decay=st.sampled_from([0.0, 0.01]), eps=hyper["eps"], weight_decay=hyper["weight_decay"],
    initial=st.sampled_from([0.0, 0.1]),
)  # fmt: skip
@example(  # exact cancellations of gradient and weight decay (see ReferenceAdagrad)
    size=65537, param_dtype=torch.bfloat16, grad_dtype=torch.bfloat16, steps=1, seed=0,
    lr=0.5, lr_decay=0.0, eps=1e-8, weight_decay=0.1, initial=0.0,
)  # fmt: skip
def test_adagrad_matches_torch(
    size: int, param_dtype: torch.dtype, grad_dtype: torch.dtype, steps: int, seed: int,
    lr: float, lr_decay: float, eps: float, weight_decay: float, initial: float,
) -> None:  # fmt: skip
    options = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
               "initial_accumulator_value": initial}  # fmt: skip
    _run_against_reference(
        lambda p: CPUAdagrad(p, **options),
        lambda p: ReferenceAdagrad(p, foreach=False, **options),
        size, param_dtype, grad_dtype, steps, seed,
    )  # fmt: skip


@given(
    size=sizes, param_dtype=st.sampled_from(DTYPES), grad_dtype=st.sampled_from(DTYPES),
    steps=st.integers(1, MAX_STEPS), seed=st.integers(0, 2**31), lr=hyper["lr"], beta1=hyper["beta1"],
    beta2=hyper["beta2"], weight_decay=hyper["weight_decay"],
)  # fmt: skip
def test_lion_matches_reference(
    size: int, param_dtype: torch.dtype, grad_dtype: torch.dtype, steps: int, seed: int,
    lr: float, beta1: float, beta2: float, weight_decay: float,
) -> None:  # fmt: skip
    options: dict[str, Any] = {"lr": lr, "betas": (beta1, beta2), "weight_decay": weight_decay}
    _run_against_reference(
        lambda p: CPULion(p, **options), lambda p: ReferenceLion(p, **options),
        size, param_dtype, grad_dtype, steps, seed,
    )  # fmt: skip


def test_nan_and_inf_gradients_propagate_like_torch() -> None:
    grad = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    ours_p, ref_p = torch.ones(4, requires_grad=True), torch.ones(4, requires_grad=True)
    ours_p.grad, ref_p.grad = grad.clone(), grad.clone()
    CPUAdam([ours_p], lr=0.1).step()
    torch.optim.AdamW([ref_p], lr=0.1, weight_decay=0.0, foreach=False).step()
    assert torch.equal(ours_p.isnan(), ref_p.isnan())
    torch.testing.assert_close(ours_p[~ours_p.isnan()], ref_p[~ref_p.isnan()])


def test_parameters_without_gradients_are_skipped_like_torch() -> None:
    used, unused = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    used.grad = torch.ones(3)
    optimizer = CPUAdam([used, unused], lr=0.1)
    optimizer.step()
    assert torch.equal(unused.detach(), torch.ones(3))
    assert unused not in optimizer.state
    assert not torch.equal(used.detach(), torch.ones(3))


def test_param_groups_and_closure() -> None:
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    optimizer = CPUAdam([{"params": [a]}, {"params": [b], "lr": 0.0}], lr=0.1)

    def closure() -> float:
        optimizer.zero_grad()
        loss = (a * 2).sum() + (b * 3).sum()
        loss.backward()
        return float(loss.detach())

    assert optimizer.step(closure) == 10.0
    assert torch.equal(b.detach(), torch.ones(2))  # lr 0 group
    assert (a.detach() < 1).all()


@pytest.mark.parametrize(
    ("ours_cls", "torch_cls", "options"),
    [
        (CPUAdam, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.01}),
        (CPUAdagrad, torch.optim.Adagrad, {"lr": 0.05}),
    ],
)
def test_checkpoints_move_between_torch_and_accel(
    ours_cls: type[torch.optim.Optimizer],
    torch_cls: type[torch.optim.Optimizer],
    options: dict[str, Any],
) -> None:
    torch.manual_seed(0)
    grads = [torch.randn(64) for _ in range(6)]
    start = torch.randn(64)

    def run(
        first: type[torch.optim.Optimizer], second: type[torch.optim.Optimizer]
    ) -> torch.Tensor:
        p = start.clone().requires_grad_()
        optimizer = first([p], **options)
        for g in grads[:3]:
            p.grad = g.clone()
            optimizer.step()
        resumed = second([p], **options)
        resumed.load_state_dict(optimizer.state_dict())
        for g in grads[3:]:
            p.grad = g.clone()
            resumed.step()
        return p.detach()

    reference = run(torch_cls, torch_cls)
    torch.testing.assert_close(run(torch_cls, ours_cls), reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(run(ours_cls, torch_cls), reference, rtol=1e-5, atol=1e-6)


def test_state_uses_torch_key_names() -> None:
    p = torch.ones(4, requires_grad=True)
    p.grad = torch.ones(4)
    optimizer = CPUAdam([p])
    optimizer.step()
    state = optimizer.state_dict()["state"][0]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert float(state["step"]) == 1.0


def _step_in_child(queue: Any) -> None:
    p = torch.ones(1 << 18, requires_grad=True)
    p.grad = torch.ones(1 << 18)
    CPUAdam([p], lr=0.1).step()
    queue.put(float(p.detach()[0]))


def test_steps_work_in_a_forked_child_after_the_parent_used_openmp() -> None:
    p = torch.ones(1 << 20, requires_grad=True)
    p.grad = torch.ones(1 << 20)
    CPUAdam([p], lr=0.1).step()  # the parent's OpenMP pool is now running
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_step_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung in its first optimizer step")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == pytest.approx(0.9)


def _two_params(**tensors: list[torch.Tensor]) -> None:
    fresh = {
        "params": [torch.zeros(4), torch.zeros(4)],
        "grads": [torch.ones(4), torch.ones(4)],
        "exp_avgs": [torch.zeros(4), torch.zeros(4)],
        "exp_avg_sqs": [torch.zeros(4), torch.zeros(4)],
    }
    fresh.update(tensors)
    cpu_optim.adam_step(fresh["params"], fresh["grads"], fresh["exp_avgs"], fresh["exp_avg_sqs"],
                        steps=[1, 1], lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                        adamw=True, param_copies=tensors.get("copies"))  # fmt: skip


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("views of one storage", r"params\[0\] and params\[1\] overlap"),
        ("a grad that is another param", r"grads\[0\] and params\[1\] overlap"),
        ("one exp_avg for two params", r"exp_avgs\[0\] and exp_avgs\[1\] overlap"),
        ("overlapping param_copies", r"param_copies\[0\] and param_copies\[1\] overlap"),
    ],
)
def test_tensors_aliasing_across_parameters_are_rejected(case: str, message: str) -> None:
    # Accepted before, these gave nondeterministic results (the kernels run the
    # parameters in parallel and promise __restrict).
    storage, params, shared = torch.zeros(6), [torch.zeros(4), torch.zeros(4)], torch.zeros(4)
    halves = torch.zeros(6, dtype=torch.bfloat16)
    tensors = {
        "views of one storage": {"params": [storage[:4], storage[2:6]]},
        "a grad that is another param": {"params": params, "grads": [params[1], torch.ones(4)]},
        "one exp_avg for two params": {"exp_avgs": [shared, shared]},
        "overlapping param_copies": {"copies": [halves[:4], halves[2:6]]},
    }[case]
    with pytest.raises(ValueError, match=message):
        _two_params(**tensors)


def test_an_optimizer_over_overlapping_parameters_refuses_to_step() -> None:
    base = torch.zeros(6, requires_grad=True)
    first, second = base.detach()[:4], base.detach()[2:]
    first.requires_grad_(True)
    second.requires_grad_(True)
    first.grad, second.grad = torch.ones(4), torch.ones(4)
    with pytest.raises(ValueError, match=r"params\[0\] and params\[1\] overlap"):
        CPUAdam([first, second]).step()


@pytest.mark.parametrize(
    ("cls", "options", "message"),
    [
        (CPUAdam, {"lr": -1.0}, "lr must be"),
        (CPUAdam, {"betas": (0.9, 1.0)}, r"betas\[1\]"),
        (CPUAdam, {"eps": -1e-8}, "eps must be"),
        (CPUAdagrad, {"lr_decay": -0.1}, "lr_decay must be"),
        (CPUAdagrad, {"initial_accumulator_value": -1.0}, "initial_accumulator_value must be"),
        (CPULion, {"betas": (1.5, 0.99)}, r"betas\[0\]"),
        (CPULion, {"weight_decay": -0.5}, "weight_decay must be"),
        (
            CPUAdam,
            {"adamw_mode": "no"},
            r"adamw_mode must be True or False \(or 1 or 0\), got 'no'",
        ),
        (CPUAdam, {"bias_correction": 2}, r"bias_correction must be True or False"),
    ],
)
def test_invalid_hyper_parameters_are_rejected_at_construction(
    cls: type[torch.optim.Optimizer], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cls([torch.zeros(2, requires_grad=True)], **options)


def test_optimizer_errors_name_the_group() -> None:
    p = torch.zeros(4, requires_grad=True)
    p.grad = torch.zeros(4).to_sparse()
    with pytest.raises(ValueError, match=r"param_groups\[0\]: grads\[0\] must be a dense tensor"):
        CPUAdam([p]).step()


def test_flags_it_does_not_implement_are_refused_not_ignored() -> None:
    p = torch.zeros(4, requires_grad=True)
    p.grad = torch.zeros(4)
    optimizer = CPUAdam([p])
    optimizer.param_groups[0]["amsgrad"] = True  # e.g. loaded from an amsgrad checkpoint
    with pytest.raises(ValueError, match="amsgrad=True, which CPUAdam does not implement"):
        optimizer.step()


def _trained_adam(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, CPUAdam]:
    param = torch.nn.Parameter(torch.linspace(-1, 1, 1000).to(dtype))
    optimizer = CPUAdam([param], lr=1e-3)
    for seed in range(3):
        param.grad = torch.randn(1000, generator=torch.Generator().manual_seed(seed)).to(dtype)
        optimizer.step()
    return param, optimizer


def test_a_failed_step_does_not_advance_the_step_counter() -> None:
    # torch's optimizers count a step only when it is taken; the counter decides the
    # bias correction, so a failed step must leave it alone.
    param, optimizer = _trained_adam()
    param.grad = torch.zeros(2000)[::2]  # not contiguous: the step fails
    with pytest.raises(ValueError, match=r"grads\[0\] must be contiguous"):
        optimizer.step()
    assert float(optimizer.state[param]["step"]) == 3


def test_a_state_of_the_wrong_shape_is_refused() -> None:
    param = torch.nn.Parameter(torch.zeros(2, 3))
    param.grad = torch.ones(2, 3)
    optimizer = CPUAdam([param])
    optimizer.state[param].update(
        step=torch.tensor(1.0), exp_avg=torch.zeros(3, 2), exp_avg_sq=torch.zeros(2, 3)
    )
    with pytest.raises(
        ValueError, match=r"params\[0\]: state 'exp_avg' has shape \(3, 2\), the parameter \(2, 3\)"
    ):
        optimizer.step()


def test_a_state_from_another_optimizer_is_named_not_a_key_error() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    optimizer = CPUAdam([param])
    optimizer.state[param].update(step=torch.tensor(1.0), sum=torch.zeros(4))  # Adagrad's
    with pytest.raises(
        ValueError,
        match=r"params\[0\]: the state has no tensor 'exp_avg' \(keys: \['step', 'sum'\]\); was it loaded from another optimizer than CPUAdam\?",
    ):
        optimizer.step()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_state_dict_round_trip_keeps_fp32_states_with_16_bit_params(dtype: torch.dtype) -> None:
    # torch's load_state_dict casts states to the parameter's dtype: 805 of 1,000 exp_avg
    # values changed with bf16 parameters before.
    param, optimizer = _trained_adam(dtype)
    saved = {name: optimizer.state[param][name].clone() for name in ("exp_avg", "exp_avg_sq")}
    resumed = CPUAdam([param], lr=1e-3)
    resumed.load_state_dict(optimizer.state_dict())
    for name, value in saved.items():
        restored = resumed.state[param][name]
        assert restored.dtype == torch.float32
        assert torch.equal(restored, value), name
    assert float(resumed.state[param]["step"]) == 3


def test_betas_must_be_a_pair() -> None:
    with pytest.raises(ValueError, match=r"betas must be a pair \(beta1, beta2\), got \(0.9,\)"):
        CPUAdam([torch.zeros(2, requires_grad=True)], betas=(0.9,))  # type: ignore[arg-type]


def test_load_state_dict_keeps_what_the_load_hooks_did() -> None:
    # The fp32 states were taken again from the caller's state_dict after torch's load:
    # a pre-hook's new state_dict and a post-hook's changes were lost.
    param, optimizer = _trained_adam(torch.bfloat16)
    saved = optimizer.state_dict()

    def zero_exp_avg(_: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        new = copy.deepcopy(state_dict)
        for state in new["state"].values():
            state["exp_avg"] = torch.zeros_like(state["exp_avg"])
        return new

    def mark_exp_avg_sq(loaded: torch.optim.Optimizer) -> None:
        seen.append(loaded.state[param]["exp_avg_sq"].dtype)
        loaded.state[param]["exp_avg_sq"] = torch.full((1000,), 123.0)

    seen: list[torch.dtype] = []
    resumed = CPUAdam([param], lr=1e-3)
    resumed.register_load_state_dict_pre_hook(zero_exp_avg)
    resumed.register_load_state_dict_post_hook(mark_exp_avg_sq)
    resumed.load_state_dict(saved)
    assert not resumed.state[param]["exp_avg"].any()
    assert resumed.state[param]["exp_avg"].dtype == torch.float32
    assert seen == [torch.float32]  # the post-hook sees the fp32 states
    assert torch.equal(resumed.state[param]["exp_avg_sq"], torch.full((1000,), 123.0))
    resumed.load_state_dict(saved)  # the hooks of one load are not left behind
    assert len(seen) == 2


def test_adagrad_starts_sums_at_the_constructors_value_as_torch_does() -> None:
    # A group's own initial_accumulator_value was used unchecked: -1 gave parameters of
    # -1e9, and a valid 0.5 parted from torch, which uses the constructor's value.
    results = []
    for cls in (torch.optim.Adagrad, CPUAdagrad):
        first, second = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))
        groups = [{"params": [first], "initial_accumulator_value": 0.5}]
        added = {"params": [second], "initial_accumulator_value": -1.0}
        if cls is CPUAdagrad:  # its states start at the first step: an added group too
            optimizer = cls(groups, lr=0.1, initial_accumulator_value=0.25)
            optimizer.add_param_group(added)
        else:  # torch's start in its constructor (in some releases only there)
            optimizer = cls([*groups, added], lr=0.1, initial_accumulator_value=0.25)
        first.grad, second.grad = torch.ones(4), torch.ones(4)
        optimizer.step()
        results.append((first.detach().clone(), second.detach().clone()))
    for ours, torchs in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ours, torchs)


def test_a_subclass_keeps_its_own_flag_values() -> None:
    class MaximizingLion(CPULion):
        def __init__(self, params: Any) -> None:
            CPUOptimizer.__init__(self, params, {"lr": 0.1, "betas": (0.9, 0.99),
                                                 "weight_decay": 0.0, "maximize": True})  # fmt: skip

    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    optimizer = MaximizingLion([param])
    assert optimizer.defaults["maximize"] is True
    with pytest.raises(ValueError, match="maximize=True, which MaximizingLion does not implement"):
        optimizer.step()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("adamw_mode", False, r"param_groups\[0\]: sets adamw_mode=False: a param group says it "
                           r"with torch's key, decoupled_weight_decay"),
     ("decoupled_weight_decay", "x", r"param_groups\[0\]: decoupled_weight_decay must be True "
                                     r"or False \(or 1 or 0\), got 'x'")],
)  # fmt: skip
def test_a_groups_adam_switch_is_torchs_key_and_named(
    key: str, value: object, message: str
) -> None:
    # adamw_mode in a group was ignored (AdamW ran); a bad decoupled_weight_decay was named
    # "adamw", the kernel's argument.
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    optimizer = CPUAdam([param])
    optimizer.param_groups[0][key] = value
    with pytest.raises(ValueError, match=message):
        optimizer.step()


@pytest.mark.parametrize("step", [float("nan"), float("inf"), -1.0, 2.5, [1.0, 2.0]])
def test_a_step_count_that_is_no_count_is_named(step: float) -> None:
    # A NaN step raised a bare "cannot convert float NaN to integer".
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    optimizer = CPUAdam([param])
    optimizer.state[param].update(
        step=torch.tensor(step), exp_avg=torch.zeros(4), exp_avg_sq=torch.zeros(4)
    )
    with pytest.raises(
        ValueError, match=r"params\[0\]: state 'step' must be a whole number >= 0, got tensor\("
    ):
        optimizer.step()


def test_step_counts_as_tensors_or_numbers_each_advance_by_one() -> None:
    # torch keeps each count as a 0-d float tensor (counted in one call); a state loaded
    # from elsewhere may hold a number, or a tensor of another dtype, and must count too.
    params = [torch.nn.Parameter(torch.zeros(4)) for _ in range(4)]
    for p in params:
        p.grad = torch.ones(4)
    optimizer = CPUAdam(params)
    starts: list[object] = [torch.tensor(2.0), 2, torch.tensor(2, dtype=torch.int64), 2.0]
    for p, start in zip(params, starts, strict=True):
        optimizer.state[p].update(step=start, exp_avg=torch.zeros(4), exp_avg_sq=torch.zeros(4))
    reference = [torch.nn.Parameter(torch.zeros(4))]
    reference[0].grad = torch.ones(4)
    single = CPUAdam(reference)
    single.state[reference[0]].update(
        step=torch.tensor(2.0), exp_avg=torch.zeros(4), exp_avg_sq=torch.zeros(4)
    )
    optimizer.step()
    single.step()
    for p in params:  # the third step's bias correction, whatever held the count
        assert float(optimizer.state[p]["step"]) == 3
        assert torch.equal(p, reference[0])
    optimizer.step()
    assert [float(optimizer.state[p]["step"]) for p in params] == [4.0] * 4


def _column_major(value: torch.Tensor) -> torch.Tensor:
    return value.t().contiguous().t()


def _every_other_column(value: torch.Tensor) -> torch.Tensor:
    wide = torch.zeros(value.shape[0], 2 * value.shape[1])
    wide[:, ::2] = value
    return wide[:, ::2]


@pytest.mark.parametrize("layout", [_column_major, _every_other_column])
@pytest.mark.parametrize("cls", [CPUAdam, CPUAdagrad, CPULion])
def test_a_non_contiguous_state_steps_as_its_contiguous_copy(
    cls: type[CPUAdam | CPUAdagrad | CPULion], layout: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    # A checkpoint can hold transposed states (load_state_dict copies them with their
    # strides), and a caller can set strided ones; the kernels need contiguous memory.
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(16, 12, generator=generator) for _ in range(3)]
    param = torch.randn(16, 12, generator=generator).requires_grad_()
    optimizer = cls([param], lr=0.01)
    for grad in grads[:2]:
        param.grad = grad.clone()
        optimizer.step()
    saved = optimizer.state_dict()

    def resume(strided: bool) -> tuple[torch.Tensor, dict[str, Any]]:
        p = param.detach().clone().requires_grad_()
        resumed = cls([p], lr=0.01)
        resumed.load_state_dict(copy.deepcopy(saved))  # as from a file: nothing shared
        state = resumed.state[p]
        if strided:
            for name in cls.state_names:
                state[name] = layout(state[name])
                assert not state[name].is_contiguous()
        p.grad = grads[2].clone()
        resumed.step()
        return p.detach(), state

    ours, our_state = resume(strided=True)
    reference, reference_state = resume(strided=False)
    assert torch.equal(ours, reference)
    for name in cls.state_names:
        assert torch.equal(our_state[name], reference_state[name]), name


def test_a_parameter_listed_twice_and_a_transposed_one_are_named_as_such() -> None:
    # The first was reported as "exp_avgs[0] and exp_avgs[1] overlap"; the second advised
    # .contiguous(), which cannot help a parameter the step must update in place.
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    with pytest.warns(UserWarning, match="duplicate parameters"):  # torch's own warning
        twice = CPUAdam([{"params": [param, param]}])
    with pytest.raises(
        ValueError, match=r"lists one parameter twice \(params\[0\] and params\[1\]\)"
    ):
        twice.step()
    transposed = torch.nn.Parameter(torch.zeros(4, 2).t())
    transposed.grad = torch.ones(2, 4)
    with pytest.raises(
        ValueError, match=r"params\[0\] must be contiguous: the step updates it in place"
    ):
        CPUAdam([transposed]).step()


def _tensor_hyper(lr: float = 0.01) -> dict[str, Any]:
    return {"lr": torch.tensor(lr), "betas": (torch.tensor(0.9), torch.tensor(0.999))}


def test_a_torch_checkpoint_with_tensor_lr_and_betas_loads_and_steps() -> None:
    # torch.optim.AdamW takes them and saves them in its param groups; CPUAdam loaded such
    # a checkpoint and failed at its first step ("betas[0] must be in [0, 1), got
    # tensor(0.9000)").
    generator = torch.Generator().manual_seed(3)
    grads = [torch.randn(64, generator=generator) for _ in range(6)]
    start = torch.randn(64, generator=generator)

    def run(second: type[torch.optim.Optimizer]) -> torch.Tensor:
        p = start.clone().requires_grad_()
        first = torch.optim.AdamW([p], weight_decay=0.01, **_tensor_hyper())
        for g in grads[:3]:
            p.grad = g.clone()
            first.step()
        resumed = second([p], lr=0.5, weight_decay=0.01)  # the checkpoint's lr wins
        resumed.load_state_dict(first.state_dict())
        assert isinstance(resumed.param_groups[0]["lr"], torch.Tensor)
        for g in grads[3:]:
            p.grad = g.clone()
            resumed.step()
        return p.detach()

    torch.testing.assert_close(run(CPUAdam), run(torch.optim.AdamW), rtol=1e-5, atol=1e-6)


def test_a_tensor_lr_is_read_at_each_step_as_a_scheduler_changes_it() -> None:
    # torch's schedulers change a tensor lr in place (fill_): the group keeps the tensor.
    generator = torch.Generator().manual_seed(4)
    grads = [torch.randn(32, generator=generator) for _ in range(5)]
    results = []
    for cls in (torch.optim.AdamW, CPUAdam):
        p = torch.ones(32, requires_grad=True)
        optimizer = cls([p], weight_decay=0.01, **_tensor_hyper(0.1))
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        for g in grads:
            p.grad = g.clone()
            optimizer.step()
            scheduler.step()
        assert float(optimizer.param_groups[0]["lr"]) == pytest.approx(0.1 * 0.5**5)
        results.append(p.detach())
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        (CPUAdam, {"eps": 1e-6, "weight_decay": 0.1}),
        (CPUAdagrad, {"lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.5}),
        (CPULion, {"betas": (0.8, 0.95), "weight_decay": 0.1}),
    ],
)
def test_tensor_hyper_parameters_step_as_the_numbers_they_hold(
    cls: type[CPUOptimizer], options: dict[str, Any]
) -> None:
    # float64 tensors hold each number exactly: the steps must be the same, bit for bit.
    def as_tensors(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(as_tensors(v) for v in value)
        return torch.tensor(value, dtype=torch.float64)

    results = []
    for hyper in (
        {"lr": 0.01, **options},
        {k: as_tensors(v) for k, v in {"lr": 0.01, **options}.items()},
    ):
        p = torch.linspace(-1, 1, 100).requires_grad_()
        optimizer = cls([p], **hyper)
        for step in range(3):
            p.grad = torch.linspace(-1, 1, 100) * (step + 1)
            optimizer.step()
        results.append(p.detach())
    assert torch.equal(results[0], results[1])


def _overlapping_groups() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    base = torch.zeros(6)
    first, second = base[:4], base[2:]
    for view in (first, second):
        view.requires_grad_(True)
        view.grad = torch.ones(4)
    return base, first, second


def test_parameters_of_two_groups_that_share_memory_are_refused() -> None:
    # Each group's call refused its own overlaps only: across two groups the shared
    # elements were stepped twice (base came out [-0.1, -0.1, -0.2, -0.2, -0.1, -0.1]).
    base, first, second = _overlapping_groups()
    unrelated = torch.nn.Parameter(torch.zeros(3))
    unrelated.grad = torch.ones(3)
    optimizer = CPUAdam([{"params": [unrelated, first]}, {"params": [second]}], lr=0.1)
    with pytest.raises(
        ValueError,
        match=r"^param_groups\[0\] params\[1\] and param_groups\[1\] params\[0\] overlap in "
        r"memory; each tensor needs its own storage$",
    ):
        optimizer.step()
    assert not base.any()
    assert not unrelated.detach().any()
    assert all(float(state["step"]) == 0 for state in optimizer.state.values())


def test_a_parameter_moved_onto_another_groups_memory_is_refused_at_the_next_step() -> None:
    # The check is skipped while the parameters' addresses stay those it last found
    # disjoint: a storage swapped in between (param.data = ...) is checked again.
    a, b = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(4))
    optimizer = CPUAdam([{"params": [a]}, {"params": [b]}], lr=0.1)
    for _ in range(2):
        a.grad, b.grad = torch.ones(4), torch.ones(4)
        optimizer.step()
    b.data = a.data[1:3]
    b.grad = torch.ones(2)
    optimizer.state[b].update(exp_avg=torch.zeros(2), exp_avg_sq=torch.zeros(2))
    before = a.detach().clone()
    with pytest.raises(
        ValueError, match=r"param_groups\[0\] params\[0\] and param_groups\[1\] params\[0\] overlap"
    ):
        optimizer.step()
    assert torch.equal(a.detach(), before)


def test_groups_may_share_memory_with_a_frozen_parameter() -> None:
    # Only the parameters a step updates (those with gradients) must not overlap.
    base, first, second = _overlapping_groups()
    second.grad = None
    CPUAdam([{"params": [first]}, {"params": [second]}], lr=0.1).step()
    assert base[:4].lt(0).all()
    assert not base[4:].any()


@pytest.mark.parametrize(
    "saved_step",
    [np.int64(2), np.int32(2), np.uint8(2), np.float64(2.0), np.float32(2.0), 2, 2.0,
     torch.tensor(2), torch.tensor(2.0, dtype=torch.float64), torch.tensor([2.0])],
    ids=repr,
)  # fmt: skip
def test_a_checkpoint_step_of_any_whole_number_type_loads(saved_step: object) -> None:
    # torch.optim.AdamW loads a NumPy integer step (a checkpoint written with NumPy);
    # CPUAdam refused it as "must be a whole number >= 0, got np.int64(1)".
    def trained() -> tuple[torch.Tensor, dict[str, Any]]:
        p = torch.nn.Parameter(torch.linspace(-1, 1, 16))
        optimizer = CPUAdam([p], lr=0.1)
        for _ in range(2):
            p.grad = torch.linspace(1, -1, 16)
            optimizer.step()
        return p, optimizer.state_dict()

    results = []
    for step in (torch.tensor(2.0), saved_step):
        p, saved = trained()
        saved["state"][0]["step"] = step
        resumed = CPUAdam([p], lr=0.1)
        resumed.load_state_dict(saved)
        p.grad = torch.linspace(1, -1, 16)
        resumed.step()
        assert float(resumed.state[p]["step"]) == 3
        results.append(p.detach())
    assert torch.equal(results[0], results[1])  # step 3's bias correction, whatever held 2


def test_a_state_without_a_step_is_named_not_a_key_error() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    optimizer = CPUAdam([param])
    optimizer.state[param].update(exp_avg=torch.zeros(4), exp_avg_sq=torch.zeros(4))
    with pytest.raises(
        ValueError,
        match=r"^param_groups\[0\] params\[0\]: the state has no 'step' \(keys: \['exp_avg', "
        r"'exp_avg_sq'\]\); was it loaded from another optimizer than CPUAdam\?$",
    ):
        optimizer.step()
