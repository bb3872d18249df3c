"""The validating front door of the CPU optimizer kernels (accel.ops.cpu_optim): its checks,
the native checks behind them, and the 16-bit conversions, bit for bit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from accel.ops import _cpu_optim, cpu_optim
from accel.ops import _hyperparameters as hyperparameters
from tests.support.strategies import sizes


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
        ({"exp_avgs": [torch.zeros(4, dtype=torch.float64)]}, TypeError, r"exp_avgs\[0\] must be float32, bfloat16 or float16, got torch.float64"),
        ({"exp_avgs": [torch.zeros(4, dtype=torch.bfloat16)]}, TypeError, r"exp_avg_sqs\[0\] is torch.float32 and exp_avgs\[0\] torch.bfloat16: a parameter's states must share one dtype"),
        ({"exp_avg_sqs": [torch.zeros(3)]}, ValueError, r"exp_avg_sqs\[0\] has 3 elements, params\[0\] 4"),
        ({"steps": [0]}, ValueError, r"steps\[0\] must be >= 1 \(the step being taken\) and below 2\*\*63, got 0"),
        ({"steps": [10**19]}, ValueError, r"steps\[0\] must be >= 1 .*got 10000000000000000000"),
        ({"steps": [2.5]}, ValueError, r"steps\[0\] must be a whole number >= 1, got 2.5"),
        ({"steps": [torch.tensor(2.5)]}, ValueError, r"steps\[0\] must be a whole number >= 1"),
        ({"steps": [float("nan")]}, ValueError, r"steps\[0\] must be a whole number >= 1, got nan"),
        ({"eps": 1e-50}, ValueError, r"eps must be a finite number > 0 that float32 holds .*got 1e-50"),
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
        ({"adamw": "no"}, ValueError, r"adamw must be True or False \(or 1 or 0\), got 'no'"),
        ({"bias_correction": None}, ValueError, r"bias_correction must be True or False \(or 1 or 0\), got None"),
    ],
)  # fmt: skip
def test_bad_input_is_rejected_with_a_clear_message(
    overrides: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _adam(**overrides)


def _shrunk(numel: int, start: int = 0, keep: int = 0) -> torch.Tensor:
    tensor = torch.zeros(numel + start)[start:]
    tensor.untyped_storage().resize_(keep)  # as FSDP and ZeRO-3 free a parameter's memory
    return tensor


def _inference() -> torch.Tensor:
    with torch.inference_mode():
        return torch.zeros(4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # The kernels wrote through data_ptr(): at address 8, or past a 16-byte allocation.
        ({"params": [_shrunk(4, start=2)]}, r"params\[0\] reaches byte 24 of its storage, which holds 0"),
        ({"grads": [_shrunk(4, keep=4)]}, r"grads\[0\] reaches byte 16 of its storage, which holds 4"),
        # A negative view's memory holds the values before negation: the step went the wrong way.
        ({"grads": [torch.ones(4)._neg_view()]}, r"grads\[0\] is a lazy negative or conjugate view"),
        ({"params": [_inference()]}, r"params\[0\] is an inference tensor"),
    ],
)  # fmt: skip
def test_tensors_the_step_must_not_touch_are_rejected(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _adam(**overrides)


def test_a_step_marks_what_it_wrote_as_changed_in_place() -> None:
    # As torch's optimizers do: a backward that saved a parameter before the step raises
    # instead of computing with the updated values.
    param = torch.nn.Parameter(torch.ones(4))
    loss = (param * param).sum()  # saves param
    param.grad = torch.ones(4)
    before = param._version
    states = [torch.zeros(4), torch.zeros(4)]
    versions = [t._version for t in states]
    _adam(
        params=[param.detach()], grads=[param.grad], exp_avgs=[states[0]], exp_avg_sqs=[states[1]]
    )
    assert param._version > before
    assert [t._version for t in states] > versions
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_numpy_scalars_are_numbers() -> None:
    _adam(betas=(np.float32(0.9), np.float64(0.99)), lr=np.float32(0.1), eps=np.float32(1e-8))


def test_aliased_tensors_are_rejected() -> None:
    shared = torch.zeros(8)
    with pytest.raises(ValueError, match=r"params\[0\] and exp_avgs\[0\] overlap in memory"):
        _adam(params=[shared[:4]], exp_avgs=[shared[2:6]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_may_share_memory_with_each_other(dtype: torch.dtype) -> None:
    # They are only read; the step was refused ("grads[0] and grads[1] overlap").
    grad = torch.randn(64).to(dtype)
    shared = [torch.randn(64) for _ in range(2)]
    separate = [p.clone() for p in shared]
    for params, grads in ((shared, [grad, grad]), (separate, [grad.clone(), grad.clone()])):
        states = [[torch.zeros(64) for _ in range(2)] for _ in range(2)]
        cpu_optim.adam_step(params, grads, states[0], states[1], [1, 1], lr=0.1,
                            betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, adamw=False)  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(shared, separate, strict=True))
    # Still refused: a gradient that is another parameter's memory (written).
    first, second = torch.zeros(4), torch.zeros(4)
    with pytest.raises(ValueError, match=r"grads\[0\] and params\[1\] overlap in memory"):
        _adam(params=[first, second], grads=[second, torch.zeros(4)], steps=[1, 1],
              exp_avgs=[torch.zeros(4), torch.zeros(4)],
              exp_avg_sqs=[torch.zeros(4), torch.zeros(4)])  # fmt: skip


def test_gradients_may_be_inference_tensors() -> None:
    # Only read: torch.optim steps with them; they were refused as if written.
    with torch.inference_mode():
        grad, state = torch.ones(4), torch.zeros(4)
    param = torch.zeros(4)
    _adam(params=[param], grads=[grad])
    assert torch.all(param < 0)
    with pytest.raises(ValueError, match=r"exp_avgs\[0\] is an inference tensor"):
        _adam(exp_avgs=[state])  # written: refused, as before


def test_the_raw_kernels_are_not_public() -> None:
    # native().adam_step([16], ...) took any integer for an address: a segfault.
    assert not hasattr(cpu_optim, "native")


def test_native_checks_catch_callers_that_bypass_the_wrapper() -> None:
    from accel.ops import _cpu_optim as native

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
    # Gradients are only read: two parameters may read one, but none may be written memory.
    q, n = torch.zeros(4), torch.zeros(4)
    two = {"copies": [0, 0], "numels": [4, 4], "param_dtypes": [0, 0], "grad_dtypes": [0, 0],
           "copy_dtypes": [-1, -1], "state_dtypes": [0, 0]}  # fmt: skip
    lion(params=[p.data_ptr(), q.data_ptr()], grads=[g.data_ptr()] * 2,
         exp_avgs=[m.data_ptr(), n.data_ptr()], **two)  # fmt: skip
    with pytest.raises(ValueError, match=r"grads\[0\] and params\[1\] overlap in memory"):
        lion(params=[p.data_ptr(), g.data_ptr() + 8], grads=[g.data_ptr()] * 2,
             exp_avgs=[m.data_ptr(), n.data_ptr()], **two)  # fmt: skip
    with pytest.raises(ValueError, match=r"states\[0\] has dtype code 7, which is none of"):
        lion(state_dtypes=[7])
    with pytest.raises(ValueError, match="one entry per parameter"):
        lion(state_dtypes=[0, 0])
    # The overlap check measures a state in its own dtype: 4 bf16 values 8 bytes before the
    # gradient end where it starts, 4 float32 values reach into it.
    shared = torch.zeros(12)
    state_at, grads_at = shared.data_ptr() + 8, shared.data_ptr() + 16
    lion(grads=[grads_at], exp_avgs=[state_at], state_dtypes=[1])
    with pytest.raises(ValueError, match=r"state\[0\] and grads\[0\] overlap in memory"):
        lion(grads=[grads_at], exp_avgs=[state_at], state_dtypes=[0])
    with pytest.raises(TypeError):  # hyper-parameters are keyword-only: no positional floats
        native.lion_step([p.data_ptr()], [g.data_ptr()], [m.data_ptr()], [0], [4], [0], [0],
                         [-1], 0.1, 0.9, 0.99, 0.0)  # fmt: skip


# Each kernel's hyper-parameters, with valid values, and the Python check of each.
_NATIVE_HYPER: dict[str, dict[str, float]] = {
    "adam_step": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    "adagrad_step": {"lr": 1e-2, "lr_decay": 0.0, "eps": 1e-10, "weight_decay": 0.0},
    "lion_step": {"lr": 1e-4, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0},
}
_PYTHON_CHECK = {
    "lr": lambda v: hyperparameters.check_non_negative(v, "lr"),
    "lr_decay": lambda v: hyperparameters.check_non_negative(v, "lr_decay"),
    "weight_decay": lambda v: hyperparameters.check_non_negative(v, "weight_decay"),
    "beta1": lambda v: hyperparameters.check_beta(v, "beta1"),
    "beta2": lambda v: hyperparameters.check_beta(v, "beta2"),
    "eps": hyperparameters.check_eps,
}


def _native_step(kernel: str, tensors: list[torch.Tensor], **change: float) -> None:
    """One raw kernel call on float32 ``tensors`` (param, grad, then the states), as a
    caller that bypasses accel.ops.cpu_optim makes it."""
    param, grad, *states = tensors
    names = {"adam_step": ("exp_avgs", "exp_avg_sqs"), "adagrad_step": ("sums",),
             "lion_step": ("exp_avgs",)}[kernel]  # fmt: skip
    arguments: dict[str, Any] = {
        "params": [param.data_ptr()], "grads": [grad.data_ptr()], "copies": [0],
        "numels": [param.numel()], "param_dtypes": [0], "grad_dtypes": [0], "copy_dtypes": [-1],
        **{name: [state.data_ptr()] for name, state in zip(names, states, strict=True)},
        **_NATIVE_HYPER[kernel], **change,
    }  # fmt: skip
    if kernel != "lion_step":
        arguments["steps"] = [1]
    if kernel == "adam_step":
        arguments |= {"decoupled": True, "bias_correction": True}
    getattr(_cpu_optim, kernel)(**arguments)


def _fresh(kernel: str) -> list[torch.Tensor]:
    return [torch.ones(4) for _ in range(4 if kernel == "adam_step" else 3)]


@pytest.mark.parametrize(
    ("kernel", "change", "message"),
    [
        ("adam_step", {"lr": -1.0}, r"^lr must be a finite number >= 0 \(at most float32's 3.403e\+38\), got -1$"),
        ("adam_step", {"lr": math.nan}, r"^lr must be .*, got nan$"),
        ("adam_step", {"beta1": 1.5}, r"^beta1 must be in \[0, 1\), got 1.5$"),
        ("adam_step", {"beta2": 1.0}, r"^beta2 must be in \[0, 1\), got 1$"),
        ("adam_step", {"eps": 0.0}, r"^eps must be a finite number > 0 that float32 holds \(1.401e-45 to 3.403e\+38\), got 0$"),
        ("adam_step", {"eps": -1.0}, r"^eps must be .*, got -1$"),
        ("adam_step", {"weight_decay": math.inf}, r"^weight_decay must be a finite number >= 0 .*, got inf$"),
        ("adagrad_step", {"lr": math.nan}, r"^lr must be .*, got nan$"),
        ("adagrad_step", {"lr_decay": -1.0}, r"^lr_decay must be a finite number >= 0 .*, got -1$"),
        ("adagrad_step", {"eps": 0.0}, r"^eps must be .*, got 0$"),
        ("adagrad_step", {"weight_decay": -3.0}, r"^weight_decay must be .*, got -3$"),
        ("lion_step", {"lr": math.nan}, r"^lr must be .*, got nan$"),
        ("lion_step", {"beta1": 2.0}, r"^beta1 must be in \[0, 1\), got 2$"),
        ("lion_step", {"beta2": -1.0}, r"^beta2 must be in \[0, 1\), got -1$"),
        ("lion_step", {"weight_decay": -5.0}, r"^weight_decay must be .*, got -5$"),
    ],
)  # fmt: skip
def test_the_kernels_refuse_hyper_parameters_out_of_range(
    kernel: str, change: dict[str, float], message: str
) -> None:
    # Accepted before: the caller's tensors came back NaN, infinite or stepped the wrong way.
    tensors = _fresh(kernel)
    with pytest.raises(ValueError, match=message):
        _native_step(kernel, tensors, **change)
    assert all(torch.equal(t, torch.ones(4)) for t in tensors)  # refused before any write


_EDGES = [
    0.0, -0.0, 1.0, math.nextafter(1.0, 0.0), hyperparameters.FLOAT32_MAX,
    math.nextafter(hyperparameters.FLOAT32_MAX, math.inf), hyperparameters.FLOAT32_TINY,
    math.nextafter(hyperparameters.FLOAT32_TINY, 0.0), -hyperparameters.FLOAT32_TINY,
]  # fmt: skip


@given(
    kernel_and_name=st.sampled_from(
        [(kernel, name) for kernel, hyper in _NATIVE_HYPER.items() for name in hyper]
    ),
    value=st.one_of(st.floats(), st.sampled_from(_EDGES)),
)
@example(kernel_and_name=("adam_step", "eps"), value=hyperparameters.FLOAT32_TINY)
def test_the_kernels_accept_exactly_the_hyper_parameters_python_accepts(
    kernel_and_name: tuple[str, str], value: float
) -> None:
    kernel, name = kernel_and_name
    try:
        _PYTHON_CHECK[name](value)
        python_accepts = True
    except ValueError:
        python_accepts = False
    if python_accepts:
        _native_step(kernel, _fresh(kernel), **{name: value})
    else:
        with pytest.raises(ValueError, match=f"^{name} must be "):
            _native_step(kernel, _fresh(kernel), **{name: value})


_INTEGER_RANGES = {torch.int64: (-(2**63), 2**63 - 1), torch.int32: (-(2**31), 2**31 - 1),
                   torch.uint8: (0, 255)}  # fmt: skip


@st.composite
def _one_element_tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16,
                                  *_INTEGER_RANGES]))  # fmt: skip
    if dtype in _INTEGER_RANGES:
        value: float = draw(st.integers(*_INTEGER_RANGES[dtype]))
    else:
        value = draw(st.one_of(st.floats(), st.sampled_from([0.9, 0.999, 1e-8, 1e-45, 1.0])))
    return torch.tensor(value, dtype=dtype).reshape(draw(st.sampled_from([(), (1,), (1, 1)])))


def _outcome(check: Any, value: object) -> tuple[bool, object]:
    try:
        return True, check(value)
    except ValueError:
        return False, None


@given(tensor=_one_element_tensors(), name=st.sampled_from(sorted(_PYTHON_CHECK)))
def test_a_one_element_tensor_is_checked_as_the_number_it_holds(
    tensor: torch.Tensor, name: str
) -> None:
    # torch.optim takes lr and betas as tensors, and its checkpoints carry them; they were
    # refused in range ("betas[0] must be in [0, 1), got tensor(0.9000)").
    check = _PYTHON_CHECK[name]
    assert _outcome(check, tensor) == _outcome(check, tensor.item())


def test_tensor_hyper_parameters_step_as_the_numbers_they_hold() -> None:
    results = []
    for wrap in (float, lambda v: torch.tensor(v, dtype=torch.float64)):
        params, exp_avgs, exp_avg_sqs = [torch.ones(8)], [torch.zeros(8)], [torch.zeros(8)]
        cpu_optim.adam_step(params, [torch.linspace(-1, 1, 8)], exp_avgs, exp_avg_sqs, [1],
                            lr=wrap(0.01), betas=(wrap(0.9), wrap(0.999)), eps=wrap(1e-8),
                            weight_decay=wrap(0.1), adamw=True)  # fmt: skip
        results.append((params[0], exp_avgs[0], exp_avg_sqs[0]))
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))  # bit for bit


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (torch.zeros(2), r"shape \(2,\), torch.float32, on cpu"),
        (torch.tensor(True), r"shape \(\), torch.bool, on cpu"),
        (torch.tensor(0.1j), r"shape \(\), torch.complex64, on cpu"),
        (torch.zeros((), device="meta"), r"shape \(\), torch.float32, on meta"),
        (torch.zeros(1).to_sparse(), r"shape \(1,\), torch.float32, torch.sparse_coo, on cpu"),
    ],
)
def test_a_tensor_torch_optim_would_not_take_is_refused_as_such(
    value: torch.Tensor, shown: str
) -> None:
    with pytest.raises(
        ValueError,
        match=r"^lr must be a number, or a tensor of one floating-point or integer element on "
        rf"the CPU \(as torch.optim takes one\), got a tensor of {shown}; pass a number",
    ):
        _adam(lr=value)
    with pytest.raises(
        ValueError, match=r"^betas\[1\] must be in \[0, 1\), got a tensor holding 1.0$"
    ):
        _adam(betas=(torch.tensor(0.9), torch.tensor(1.0)))  # in range or not, by its value


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
    # NaNs whose payload lies only in the bits a 16-bit type drops: still NaN, never inf.
    values[8:12] = torch.tensor(
        [0x7F800001, -0x007FFFFF, 0x7FBFFFFF, 0x7F801000], dtype=torch.int32
    ).view(torch.float32)
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


# Every parameter/gradient dtype pair with a kernel of its own (bf16 with fp16 has none).
DTYPE_PAIRS = [
    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32),
    (torch.float32, torch.bfloat16), (torch.float32, torch.float16),
]  # fmt: skip


@pytest.mark.parametrize("param_dtype", [torch.bfloat16, torch.float16])
def test_adam_keeps_nans_and_infinities_among_16_bit_parameters(param_dtype: torch.dtype) -> None:
    # NaN and infinite parameters, and NaN states whose payload lies only in the low 16
    # bits (such a NaN result, rounded as a number, would carry into the sign: -0.0), each
    # beside ordinary values in the same vector: those stay the fp32 step rounded.
    generator = torch.Generator().manual_seed(2)
    params = torch.randn(4099, generator=generator).to(param_dtype)
    params[[5, 40, 41, 1000]] = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), float("nan")]
    ).to(param_dtype)
    grads = torch.randn(4099, generator=generator).to(param_dtype)
    exp_avg = torch.zeros(4099)
    exp_avg[[300, 301, 4098]] = torch.tensor([0x7FBFFFFF, -1, 0x7F80FFFF], dtype=torch.int32).view(
        torch.float32
    )
    exp_avg_sq = torch.zeros(4099)
    reference = params.to(torch.float32, copy=True)
    reference_states = [exp_avg.clone(), exp_avg_sq.clone()]
    options: dict[str, Any] = {
        "lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "adamw": True,
    }  # fmt: skip
    cpu_optim.adam_step([params], [grads], [exp_avg], [exp_avg_sq], [1], **options)
    cpu_optim.adam_step(
        [reference], [grads.float()], *[[state] for state in reference_states], [1], **options
    )
    expected = reference.to(param_dtype)
    nan = expected.isnan()
    assert nan.nonzero().flatten().tolist() == [5, 300, 301, 1000, 4098]
    assert bool(params.isnan().eq(nan).all())
    assert torch.equal(params[~nan], expected[~nan])  # bit for bit: no NaN left among these
    assert bool(params.isinf().eq(expected.isinf()).all())


@pytest.mark.parametrize(("param_dtype", "grad_dtype"), DTYPE_PAIRS)
@pytest.mark.parametrize("adamw", [True, False])
def test_adam_on_16_bit_tensors_is_the_fp32_step_rounded(
    param_dtype: torch.dtype, grad_dtype: torch.dtype, adamw: bool
) -> None:
    # 70,001 elements: a full 65,536-element chunk, then a tail no vector width divides.
    generator = torch.Generator().manual_seed(1)
    params, grads = (
        torch.randn(70_001, generator=generator).to(param_dtype),
        torch.randn(70_001, generator=generator).to(grad_dtype),
    )
    # Copies even where the tensors are already fp32 (.float() would alias them).
    reference = params.to(torch.float32, copy=True)
    reference_grads = grads.to(torch.float32, copy=True)
    states = [torch.zeros(70_001) for _ in range(4)]
    for step in (1, 2, 3):
        options: dict[str, Any] = {
            "lr": 0.01,
            "betas": (0.9, 0.999),
            "eps": 1e-8,
            "weight_decay": 0.01,
            "adamw": adamw,
        }
        cpu_optim.adam_step([params], [grads], [states[0]], [states[1]], [step], **options)
        cpu_optim.adam_step(
            [reference], [reference_grads], [states[2]], [states[3]], [step], **options
        )
        reference = reference.to(param_dtype).float()
    assert torch.equal(params, reference.to(param_dtype))
    assert torch.equal(states[0], states[2])
    assert torch.equal(states[1], states[3])


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit for bit, except that any NaN matches any NaN."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    bits = torch.int32 if got.dtype == torch.float32 else torch.int16
    return bool(((got.view(bits) == want.view(bits)) | (got.isnan() & want.isnan())).all())


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


# (param, grad, state) dtypes: the first four have register kernels on x86-64-v4/v3
# (DeepSpeed's fp32_optimizer_states=False); the rest go through float32 buffers.
@pytest.mark.parametrize(
    ("param_dtype", "grad_dtype", "state_dtype"),
    [
        (BF16, BF16, BF16), (BF16, FP32, BF16), (FP16, FP16, FP16), (FP16, FP32, FP16),
        (FP32, FP32, BF16), (FP32, FP16, FP16), (BF16, BF16, FP16),
    ],
)  # fmt: skip
@pytest.mark.parametrize("adamw", [True, False])
def test_adam_with_16_bit_states_is_the_fp32_step_on_rounded_states(
    param_dtype: torch.dtype, grad_dtype: torch.dtype, state_dtype: torch.dtype, adamw: bool
) -> None:
    # 70,001 elements: a full 65,536-element chunk, then a tail no vector width divides.
    # Three steps, each rounding the parameter and both states: the states' updates fall
    # between 16-bit values, so a state kept wider than its dtype anywhere would show.
    generator = torch.Generator().manual_seed(4)
    size = 70_001
    params = torch.randn(size, generator=generator).to(param_dtype)
    grads = torch.randn(size, generator=generator).to(grad_dtype)
    exp_avg = (torch.randn(size, generator=generator) * 0.1).to(state_dtype)
    exp_avg_sq = (torch.rand(size, generator=generator) * 0.1).to(state_dtype)
    # NaN and infinite values in every tensor, beside ordinary ones in the same vectors; an
    # infinite gradient makes inf / inf, whose NaN is the default one, not an input's.
    exp_avg[[7, 65_540]] = torch.tensor([float("nan"), float("inf")]).to(state_dtype)
    exp_avg_sq[69_999] = float("nan")
    params[[3, 66_001]] = torch.tensor([float("nan"), -float("inf")]).to(param_dtype)
    grads[[12, 40_000]] = torch.tensor([float("inf"), float("nan")]).to(grad_dtype)
    options: dict[str, Any] = {
        "lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "adamw": adamw,
    }  # fmt: skip
    expected = [t.clone() for t in (params, exp_avg, exp_avg_sq)]
    for step in (1, 2, 3):
        cpu_optim.adam_step([params], [grads], [exp_avg], [exp_avg_sq], [step], **options)
        wide = [t.to(torch.float32, copy=True) for t in expected]
        cpu_optim.adam_step(
            [wide[0]], [grads.to(torch.float32, copy=True)], [wide[1]], [wide[2]], [step], **options
        )
        for want, widened in zip(expected, wide, strict=True):
            want.copy_(widened)  # rounds to nearest even, as the kernels do
    assert bool(params[12].isnan())  # inf / inf
    assert bool(exp_avg[[7, 12, 40_000]].isnan().all())
    for got, want in zip((params, exp_avg, exp_avg_sq), expected, strict=True):
        assert _same(got, want)


@pytest.mark.parametrize("state_dtype", [BF16, FP16])
def test_16_bit_states_with_param_copies_and_in_multi_tensor_calls(
    state_dtype: torch.dtype,
) -> None:
    # Tensors of different state dtypes in one call, one of them with a 16-bit copy of its
    # parameter (the ZeRO-Offload pattern), each stepped as alone in float32.
    generator = torch.Generator().manual_seed(5)
    lengths = (5, 4_099, 66_000)
    tensors = list(zip(lengths, (state_dtype, FP32, state_dtype), strict=True))
    params = [torch.randn(n, generator=generator) for n in lengths]
    grads = [torch.randn(n, generator=generator) for n in lengths]
    exp_avgs = [(torch.randn(n, generator=generator) * 0.1).to(d) for n, d in tensors]
    exp_avg_sqs = [(torch.rand(n, generator=generator) * 0.1).to(d) for n, d in tensors]
    copy = torch.empty(lengths[2], dtype=BF16)
    expected = [[t.clone() for t in column] for column in (params, exp_avgs, exp_avg_sqs)]
    options: dict[str, Any] = {
        "lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "adamw": True,
    }  # fmt: skip
    cpu_optim.adam_step(
        params, grads, exp_avgs, exp_avg_sqs, [2, 1, 2], param_copies=[None, None, copy], **options
    )
    for index, step in enumerate((2, 1, 2)):
        p, m, v = (column[index].float() for column in expected)
        cpu_optim.adam_step([p], [grads[index]], [m], [v], [step], **options)
        for column, wide in zip(expected, (p, m, v), strict=True):
            column[index].copy_(wide)
    for got_column, want_column in zip((params, exp_avgs, exp_avg_sqs), expected, strict=True):
        for got, want in zip(got_column, want_column, strict=True):
            assert _same(got, want)
    assert _same(copy, params[2].to(BF16))


@pytest.mark.parametrize(("param_dtype", "state_dtype"), [(FP32, FP32), (BF16, FP32), (BF16, BF16)])
def test_a_large_step_is_the_same_step_on_pieces(
    param_dtype: torch.dtype, state_dtype: torch.dtype
) -> None:
    # Large enough that the threads take runs far longer than the 64Ki elements small
    # calls get, and of a length no vector width divides: the split must not show.
    size = 8 * 2**17 * _cpu_optim.max_threads() + 17
    generator = torch.Generator().manual_seed(7)
    whole = [
        torch.randn(size, generator=generator).to(param_dtype),
        (torch.randn(size, generator=generator) * 1e-3).to(param_dtype),
        (torch.randn(size, generator=generator) * 0.1).to(state_dtype),
        (torch.rand(size, generator=generator) * 0.1).to(state_dtype),
    ]
    pieces = [list(t.clone().split(50_021)) for t in whole]
    options: dict[str, Any] = {
        "lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "adamw": True,
    }  # fmt: skip
    cpu_optim.adam_step(*([t] for t in whole), [3], **options)
    for index in range(len(pieces[0])):
        cpu_optim.adam_step(*([column[index]] for column in pieces), [3], **options)
    for got, want in zip(whole, pieces, strict=True):
        assert _same(got, torch.cat(want))


@pytest.mark.parametrize("state_dtype", [BF16, FP16])
@pytest.mark.parametrize("optimizer", ["adagrad", "lion"])
def test_adagrad_and_lion_with_16_bit_states_are_the_fp32_step_rounded(
    state_dtype: torch.dtype, optimizer: str
) -> None:
    generator = torch.Generator().manual_seed(6)
    size = 70_001
    params = torch.randn(size, generator=generator).to(BF16)
    grads = torch.randn(size, generator=generator)
    state = (torch.rand(size, generator=generator) * 0.1).to(state_dtype)
    initial = state.clone()
    expected = [params.clone(), state.clone()]

    def step(p: torch.Tensor, s: torch.Tensor) -> None:
        if optimizer == "adagrad":
            cpu_optim.adagrad_step([p], [grads], [s], [2], lr=0.01, lr_decay=0.01, eps=1e-10,
                                   weight_decay=0.01)  # fmt: skip
        else:
            cpu_optim.lion_step([p], [grads], [s], lr=0.01, betas=(0.9, 0.99), weight_decay=0.01)

    step(params, state)
    wide = [t.float() for t in expected]
    step(*wide)
    for want, widened in zip(expected, wide, strict=True):
        want.copy_(widened)
    assert not torch.equal(state, initial)
    assert _same(params, expected[0])
    assert _same(state, expected[1])
