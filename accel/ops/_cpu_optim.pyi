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
    state_dtypes: list[int] = ...,
) -> None:
    """Adam/AdamW step over many tensors (``state_dtypes``: one dtype code per parameter
    for both its states; left out, all float32)."""

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
    state_dtypes: list[int] = ...,
) -> None:
    """Adagrad step over many tensors (``state_dtypes`` as in :func:`adam_step`)."""

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
    state_dtypes: list[int] = ...,
) -> None:
    """Lion step over many tensors (``state_dtypes`` as in :func:`adam_step`)."""

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

CHANNEL_MAX_GROUPS: int
"""The most parameter groups a step channel carries."""

CHANNEL_SLOTS: int
"""Commands that may wait for the worker at once."""

def channel_size() -> int:
    """Bytes a step channel occupies."""

def channel_init(address: int, groups: int) -> None:
    """Prepare a step channel at an address."""

def channel_submit(
    address: int,
    state_index: int,
    step: int,
    hyper: list[list[float]],
    bias_correction: list[bool],
) -> None:
    """Queue one step for the worker."""

def channel_wait(address: int, timeout: float) -> bool:
    """Wait for one completed command; False on timeout."""

def channel_exit(address: int) -> None:
    """Queue the exit command."""

def channel_next(
    address: int, timeout: float
) -> tuple[str] | tuple[str, int, int, list[tuple[float, float, float, float, float, bool]]]:
    """The worker's next command: ("step", state_index, step, groups), ("exit",) or ("idle",)."""

def channel_complete(address: int, error: str | None) -> None:
    """Report a command done, or failed with a message."""
