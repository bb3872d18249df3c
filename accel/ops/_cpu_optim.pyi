"""accel's prebuilt CPU optimizer kernels. Call them through accel.ops.cpu_optim, which
validates every argument. These functions check again what would otherwise corrupt memory
or the results, raising ValueError: list lengths, dtype codes, null and overlapping
buffers, steps below 1 and hyper-parameters out of range (lr, lr_decay and weight_decay
finite and >= 0, betas in [0, 1), eps > 0, each at most float32's largest value; eps at
least its smallest). That an address is a live buffer of the right size they cannot
check."""

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
    for both its states; left out, all float32). ValueError names a hyper-parameter out of
    range (lr, beta1, beta2, eps, weight_decay)."""

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
    """Adagrad step over many tensors (``state_dtypes`` as in :func:`adam_step`).
    ValueError names a hyper-parameter out of range (lr, lr_decay, eps, weight_decay)."""

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
    """Lion step over many tensors (``state_dtypes`` as in :func:`adam_step`). ValueError
    names a hyper-parameter out of range (lr, beta1, beta2, weight_decay)."""

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

# Every channel function raises ValueError for an address that is not aligned memory this
# process may read and write, or (but channel_init) holds no channel channel_init prepared.

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
    """Queue one step for the worker. ``hyper``: per group, lr, beta1, beta2, eps and
    weight_decay, each checked (ValueError naming the group and the parameter)."""

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
