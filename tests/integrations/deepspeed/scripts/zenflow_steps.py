"""ZenFlow's cross-process Adam as DeepSpeed's ZenFlow drives it: this process shares the
tensors and submits steps, a spawned process runs them (zenflow_utils.start_optimizer_process's
pattern). Prints one JSON line.

    python zenflow_steps.py exact [--deepspeed]   # steps equal adam_update, bit for bit
    python zenflow_steps.py fail                  # a failing step reaches this process
    python zenflow_steps.py orphan                # this process dies; prints the worker's pid

--deepspeed takes the module from DeepSpeed's CPUAdamBuilder().load() (run with
ACCEL_DEEPSPEED=1); otherwise from accel directly.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.multiprocessing as mp

SIZES = (100_003, 4_099)  # not multiples of any vector width: tails included
HYPER = ((1e-3, 0.9, 0.999, 1e-8, 0.01, 1), (3e-4, 0.85, 0.97, 1e-6, 0.0, 0))
ADAMW = False  # L2 decay: the mode comes from create_adam, not from the step


def load(use_deepspeed: bool) -> Any:
    if use_deepspeed:
        from deepspeed.ops.op_builder import CPUAdamBuilder

        return CPUAdamBuilder().load()
    from accel.integrations.deepspeed.kernels import CPUAdamKernels

    return CPUAdamKernels()


def worker(
    use_deepspeed: bool, groups: list[tuple[Any, ...]], ctrl: torch.Tensor, ready: Any
) -> None:
    op = load(use_deepspeed)
    op.create_adam(0, 1e-3, 0.9, 0.999, 1e-8, 0.0, ADAMW, False)
    handle = op.zenflow_adam_create(0, [0])
    for group in groups:
        op.zenflow_adam_register_group(handle, *group)
    ready.set()
    op.zenflow_adam_run_worker(handle, ctrl.data_ptr())
    op.zenflow_adam_destroy(handle)
    op.destroy_adam(0)


def shared(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.share_memory_() for t in tensors]


def start(op: Any, use_deepspeed: bool, groups: list[tuple[Any, ...]]) -> tuple[Any, torch.Tensor]:
    ctrl = torch.zeros(op.zenflow_adam_ctrl_size(), dtype=torch.uint8).share_memory_()
    op.zenflow_adam_ctrl_init(ctrl.data_ptr(), len(groups))
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=worker, args=(use_deepspeed, groups, ctrl, ready), daemon=True)
    proc.start()
    assert ready.wait(timeout=120), "the optimizer process did not start"
    return proc, ctrl


def submit(op: Any, ctrl: torch.Tensor, state: int, step: int) -> None:
    columns = list(zip(*HYPER, strict=True))
    op.zenflow_adam_submit(ctrl.data_ptr(), state, step, *[list(c) for c in columns])


def exact(use_deepspeed: bool) -> dict[str, object]:
    op = load(use_deepspeed)
    torch.manual_seed(0)
    groups, mirrors, initial = [], [], []
    for index, n in enumerate(SIZES):
        param, g0, g1, m0, m1, v0, v1 = shared(torch.randn(n), *[torch.zeros(n) for _ in range(6)])
        stale = shared(torch.zeros(n))[0] if index == 0 else None  # ZenFlow may pass none
        groups.append((param, g0, g1, m0, m1, v0, v1, stale))
        mirrors.append([param.clone(), [m0.clone(), m1.clone()], [v0.clone(), v1.clone()]])
        initial.append(param.clone())
    op.create_adam(1, 1e-3, 0.9, 0.999, 1e-8, 0.0, ADAMW, False)
    proc, ctrl = start(op, use_deepspeed, groups)
    no_step_pending = op.zenflow_adam_wait(ctrl.data_ptr(), 0.05)
    # ZenFlow's engine after warm-up: submit step k, then wait for step k - 1, so the
    # worker may still run one step while the next is queued.
    for step in range(1, 7):
        now = step & 1
        for group, mirror, hyper in zip(groups, mirrors, HYPER, strict=True):
            grad = torch.randn(group[0].numel())
            group[1 + now].copy_(grad)
            lr, b1, b2, eps, wd, bias = hyper
            op.adam_update(1, step, lr, b1, b2, eps, wd, bool(bias), mirror[0], grad,
                           mirror[1][now], mirror[2][now])  # fmt: skip
        submit(op, ctrl, now, step)
        if step > 1:
            assert op.zenflow_adam_wait(ctrl.data_ptr(), 120.0), f"step {step - 1} timed out"
    assert op.zenflow_adam_wait(ctrl.data_ptr(), 120.0), "the last step timed out"
    op.zenflow_adam_ctrl_exit(ctrl.data_ptr())
    proc.join(timeout=60)
    equal = {
        "param": [torch.equal(g[0], m[0]) for g, m in zip(groups, mirrors, strict=True)],
        "exp_avg": [torch.equal(g[3 + s], m[1][s]) for g, m in zip(groups, mirrors, strict=True) for s in (0, 1)],
        "exp_avg_sq": [torch.equal(g[5 + s], m[2][s]) for g, m in zip(groups, mirrors, strict=True) for s in (0, 1)],
        "stale": torch.equal(groups[0][7], groups[0][0]),
    }  # fmt: skip
    return {
        "no_step_pending": no_step_pending,
        "equal": equal,
        "changed": [not torch.equal(g[0], p) for g, p in zip(groups, initial, strict=True)],
        "worker_exit": proc.exitcode,
    }


def fail() -> dict[str, object]:
    op = load(False)
    n = 1024
    param, g1, m0, m1, v0, v1 = shared(*[torch.randn(n) for _ in range(6)])
    # grad0 is the parameter itself: the step refuses overlapping tensors.
    proc, ctrl = start(op, False, [(param, param, g1, m0, m1, v0, v1, None)])
    submit_one = list(zip(*HYPER[:1], strict=True))
    op.zenflow_adam_submit(ctrl.data_ptr(), 0, 1, *[list(c) for c in submit_one])
    try:
        op.zenflow_adam_wait(ctrl.data_ptr(), 120.0)
        error = None
    except RuntimeError as raised:
        error = str(raised)
    proc.join(timeout=60)
    return {"error": error, "worker_exit": proc.exitcode}


def orphan() -> None:
    op = load(False)
    n = 1024
    group = shared(*[torch.zeros(n) for _ in range(7)])
    proc, _ = start(op, False, [(*group, None)])
    print(json.dumps({"worker": proc.pid}), flush=True)
    os._exit(0)  # no exit command, no multiprocessing clean-up: the worker is orphaned


def main() -> None:
    mode = sys.argv[1]
    if mode == "exact":
        print(json.dumps(exact("--deepspeed" in sys.argv)))
    elif mode == "fail":
        print(json.dumps(fail()))
    elif mode == "orphan":
        orphan()
    else:
        raise SystemExit(f"unknown mode {mode!r}: exact, fail or orphan")


if __name__ == "__main__":
    main()
