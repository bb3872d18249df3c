"""accel's prebuilt CPU optimizer kernels. Call them through accel.ops.cpu_optim, which
validates every argument; these functions trust their inputs beyond basic checks."""

DTYPES: dict[str, int]
"""Element-type codes by torch dtype name (csrc/common/dtypes.h)."""

def adam_step(
    params: list[int],
    grads: list[int],
    exp_avgs: list[int],
    exp_avg_sqs: list[int],
    copies: list[int],
    numels: list[int],
    param_dtypes: list[int],
    grad_dtypes: list[int],
    copy_dtypes: list[int],
    steps: list[int],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    bias_correction: bool,
) -> None:
    """Adam/AdamW step over many tensors (fp32 states)."""

def adagrad_step(
    params: list[int],
    grads: list[int],
    sums: list[int],
    copies: list[int],
    numels: list[int],
    param_dtypes: list[int],
    grad_dtypes: list[int],
    copy_dtypes: list[int],
    steps: list[int],
    *,
    lr: float,
    lr_decay: float,
    eps: float,
    weight_decay: float,
) -> None:
    """Adagrad step over many tensors (fp32 state)."""

def lion_step(
    params: list[int],
    grads: list[int],
    exp_avgs: list[int],
    copies: list[int],
    numels: list[int],
    param_dtypes: list[int],
    grad_dtypes: list[int],
    copy_dtypes: list[int],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
) -> None:
    """Lion step over many tensors (fp32 state)."""

def scale_in_place(data: int, numel: int, factor: float) -> None:
    """x *= factor over a float32 buffer: the read-modify-write bandwidth probe."""

def simd_level() -> str:
    """The instruction set the kernels run with on this CPU."""

def isa() -> str:
    """The instruction-set level the kernels use: x86-64-v4, x86-64-v3 or baseline."""

def cpu_isa() -> str:
    """The best instruction-set level this CPU runs."""

def max_threads() -> int:
    """OpenMP threads a step may use."""
