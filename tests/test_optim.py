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

import multiprocessing
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.ops import cpu_optim
from accel.optim import CPUAdagrad, CPUAdam, CPULion

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# 0, 1, sizes that are not a multiple of any SIMD width, and one that spans two chunks.
sizes = st.sampled_from([0, 1, 3, 17, 1000, 65537])
settings_kwargs: dict[str, Any] = {}


UNIT = {torch.bfloat16: 2**-7, torch.float16: 2**-10}  # one ulp relative to the binade


def _tolerance(dtype: torch.dtype, steps: int, largest: float) -> dict[str, float]:
    if dtype in UNIT:
        return {"rtol": 0.0, "atol": steps * UNIT[dtype] * max(largest, 2**-14)}
    return {"rtol": 1e-5, "atol": 1e-5}


class ReferenceLion(torch.optim.Optimizer):
    """Lion in plain torch (fp32), for comparison."""

    def __init__(
        self, params: Any, lr: float, betas: tuple[float, float], weight_decay: float
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

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
                p.add_(torch.sign(update), alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


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
    torch.testing.assert_close(
        ours_param.detach().float(), ref_param.detach(), **_tolerance(param_dtype, steps, largest)
    )


hyper = {
    "lr": st.floats(1e-4, 0.5),
    "beta1": st.floats(0.0, 0.99),
    "beta2": st.floats(0.5, 0.9999),
    "eps": st.floats(1e-8, 1e-2),
    "weight_decay": st.sampled_from([0.0, 1e-4, 0.1]),
}


@given(
    size=sizes, param_dtype=st.sampled_from(DTYPES), grad_dtype=st.sampled_from(DTYPES),
    adamw=st.booleans(), bias_correction=st.booleans(), steps=st.integers(1, 4),
    seed=st.integers(0, 2**31), **hyper,
)  # fmt: skip
def test_adam_matches_torch(
    size: int, param_dtype: torch.dtype, grad_dtype: torch.dtype, adamw: bool,
    bias_correction: bool, steps: int, seed: int, lr: float, beta1: float, beta2: float,
    eps: float, weight_decay: float,
) -> None:  # fmt: skip
    def ref(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        cls = torch.optim.AdamW if adamw else torch.optim.Adam
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
    steps=st.integers(1, 4), seed=st.integers(0, 2**31), lr=hyper["lr"],
    lr_decay=st.sampled_from([0.0, 0.01]), eps=hyper["eps"], weight_decay=hyper["weight_decay"],
    initial=st.sampled_from([0.0, 0.1]),
)  # fmt: skip
def test_adagrad_matches_torch(
    size: int, param_dtype: torch.dtype, grad_dtype: torch.dtype, steps: int, seed: int,
    lr: float, lr_decay: float, eps: float, weight_decay: float, initial: float,
) -> None:  # fmt: skip
    options = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
               "initial_accumulator_value": initial}  # fmt: skip
    _run_against_reference(
        lambda p: CPUAdagrad(p, **options),
        lambda p: torch.optim.Adagrad(p, foreach=False, **options),
        size, param_dtype, grad_dtype, steps, seed,
    )  # fmt: skip


@given(
    size=sizes, param_dtype=st.sampled_from(DTYPES), grad_dtype=st.sampled_from(DTYPES),
    steps=st.integers(1, 4), seed=st.integers(0, 2**31), lr=hyper["lr"], beta1=hyper["beta1"],
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


@given(
    size=sizes,
    copy_dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**31),
)
def test_fused_copy_is_the_rounded_update(size: int, copy_dtype: torch.dtype, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    param, grad = torch.randn(size, generator=generator), torch.randn(size, generator=generator)
    m, v, copy = torch.zeros(size), torch.zeros(size), torch.empty(size, dtype=copy_dtype)
    cpu_optim.adam_step([param], [grad], [m], [v], [1], lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                        weight_decay=0.0, adamw=True, param_copies=[copy])  # fmt: skip
    assert torch.equal(copy, param.to(copy_dtype))  # bit-exact: same rounding as torch


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


# ---------------------------------------------------------------- bad input


def _adam(**overrides: Any) -> None:
    arguments: dict[str, Any] = {
        "params": [torch.zeros(4)], "grads": [torch.zeros(4)], "exp_avgs": [torch.zeros(4)],
        "exp_avg_sqs": [torch.zeros(4)], "steps": [1], "lr": 0.1, "betas": (0.9, 0.99),
        "eps": 1e-8, "weight_decay": 0.0, "adamw": True,
    }  # fmt: skip
    arguments.update(overrides)
    cpu_optim.adam_step(**arguments)


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"grads": [None]}, ValueError, r"grads\[0\] is None"),
        ({"grads": [torch.zeros(4).to_sparse()]}, ValueError, r"grads\[0\] must be a dense tensor"),
        ({"params": [torch.zeros(4, dtype=torch.float64)]}, TypeError, r"params\[0\] must be float32, bfloat16 or float16, got torch.float64"),
        ({"grads": [torch.zeros(5)]}, ValueError, r"grads\[0\] has shape \(5,\)"),
        ({"params": [torch.zeros(4, 2).t()], "grads": [torch.zeros(2, 4)], "exp_avgs": [torch.zeros(8)], "exp_avg_sqs": [torch.zeros(8)]}, ValueError, r"params\[0\] must be contiguous"),
        ({"params": [torch.zeros(4, device="meta")]}, ValueError, r"params\[0\] must be on the CPU, got meta"),
        ({"exp_avgs": [torch.zeros(4, dtype=torch.bfloat16)]}, TypeError, r"exp_avgs\[0\] must be float32"),
        ({"exp_avg_sqs": [torch.zeros(3)]}, ValueError, r"exp_avg_sqs\[0\] has 3 elements, params\[0\] 4"),
        ({"steps": [0]}, ValueError, "steps must all be >= 1"),
        ({"grads": []}, ValueError, "grads has 0 entries, expected one per parameter"),
        ({"lr": -0.1}, ValueError, r"lr must be a finite number >= 0 \(at most float32's 3.403e\+38\), got -0.1"),
        ({"lr": 1e300}, ValueError, r"lr must be a finite number >= 0 .*got 1e\+300"),
        ({"weight_decay": 1e39}, ValueError, r"weight_decay must be .*got 1e\+39"),
        ({"eps": 1e39}, ValueError, r"eps must be a finite number > 0 .*got 1e\+39"),
        ({"lr": float("nan")}, ValueError, "lr must be a finite number >= 0"),
        ({"betas": (1.0, 0.9)}, ValueError, r"betas\[0\] must be in \[0, 1\), got 1.0"),
        ({"betas": (0.9, -0.1)}, ValueError, r"betas\[1\] must be in \[0, 1\), got -0.1"),
        ({"eps": 0.0}, ValueError, r"eps must be a finite number > 0 .*got 0.0"),
        ({"weight_decay": -1.0}, ValueError, "weight_decay must be a finite number >= 0"),
        ({"param_copies": [torch.zeros(4)]}, TypeError, r"param_copies\[0\] must be bfloat16 or float16"),
    ],
)  # fmt: skip
def test_bad_input_is_rejected_with_a_clear_message(
    overrides: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _adam(**overrides)


def test_aliased_tensors_are_rejected() -> None:
    shared = torch.zeros(8)
    with pytest.raises(ValueError, match=r"params\[0\] and exp_avgs\[0\] overlap in memory"):
        _adam(params=[shared[:4]], exp_avgs=[shared[2:6]])


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


def test_native_checks_catch_callers_that_bypass_the_wrapper() -> None:
    native = cpu_optim.native()
    p, g, m = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    hyper = {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}

    def lion(**lists: list[int]) -> None:
        arguments = {
            "params": [p.data_ptr()], "grads": [g.data_ptr()], "exp_avgs": [m.data_ptr()],
            "copies": [0], "numels": [4], "param_dtypes": [0], "grad_dtypes": [0],
            "copy_dtypes": [-1],
        }  # fmt: skip
        native.lion_step(**{**arguments, **lists}, **hyper)

    with pytest.raises(ValueError, match="one entry per parameter"):
        lion(grads=[])
    with pytest.raises(ValueError, match=r"params\[0\] has dtype code 7, which is none of"):
        lion(param_dtypes=[7])
    with pytest.raises(ValueError, match="null buffer"):
        lion(params=[0])
    with pytest.raises(ValueError, match=r"params\[0\] and grads\[0\] overlap in memory"):
        lion(grads=[p.data_ptr() + 4])
    with pytest.raises(TypeError):  # hyper-parameters are keyword-only: no positional floats
        native.lion_step([p.data_ptr()], [g.data_ptr()], [m.data_ptr()], [0], [4], [0], [0],
                         [-1], 0.1, 0.9, 0.99, 0.0)  # fmt: skip


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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_conversions_are_exact_for_every_bit_pattern(dtype: torch.dtype) -> None:
    # Lion with lr=0 and zero gradients leaves each parameter at its own value, so every
    # 16-bit pattern goes through half -> float -> half (csrc/common/half.h).
    every = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype)
    params = every.clone()
    cpu_optim.lion_step(
        [params],
        [torch.zeros_like(params)],
        [torch.zeros(65536)],
        lr=0.0,
        betas=(0.9, 0.99),
        weight_decay=0.0,
    )
    kept = (params.view(torch.int16) == every.view(torch.int16)) | (params.isnan() & every.isnan())
    assert bool(kept.all())
    # float -> half rounding matches torch's .to(dtype), subnormals, overflow and NaN included.
    values = torch.randn(200_000, generator=torch.Generator().manual_seed(0)) * torch.logspace(
        -10, 5, 200_000
    )
    values[:8] = torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0, 65520.0, 3e-8]
    )
    copies = torch.empty(200_000, dtype=dtype)
    cpu_optim.lion_step(
        [values.clone()],
        [torch.zeros_like(values)],
        [torch.zeros_like(values)],
        lr=0.0,
        betas=(0.9, 0.99),
        weight_decay=0.0,
        param_copies=[copies],
    )
    expected = values.to(dtype)
    same = (copies.view(torch.int16) == expected.view(torch.int16)) | (
        copies.isnan() & expected.isnan()
    )
    assert bool(same.all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adam_on_16_bit_tensors_is_the_fp32_step_rounded(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(1)
    params, grads = (
        torch.randn(70_001, generator=generator).to(dtype),
        torch.randn(70_001, generator=generator).to(dtype),
    )
    reference, reference_grads = params.float(), grads.float()
    states = [torch.zeros(70_001) for _ in range(4)]
    for step in (1, 2, 3):
        options: dict[str, Any] = {
            "lr": 0.01,
            "betas": (0.9, 0.999),
            "eps": 1e-8,
            "weight_decay": 0.01,
            "adamw": True,
        }
        cpu_optim.adam_step([params], [grads], [states[0]], [states[1]], [step], **options)
        cpu_optim.adam_step(
            [reference], [reference_grads], [states[2]], [states[3]], [step], **options
        )
        reference = reference.to(dtype).float()
    assert torch.equal(params, reference.to(dtype))
    assert torch.equal(states[0], states[2])
    assert torch.equal(states[1], states[3])
