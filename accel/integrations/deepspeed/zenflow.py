"""ZenFlow's functions of DeepSpeed's ``cpu_adam`` module, prebuilt.

DeepSpeed 0.19's ZenFlow steps Adam in a dedicated process
(``deepspeed.runtime.zenflow.zenflow_utils.start_optimizer_process``): the training
process shares each group's parameter, two gradient buffers and a ``stale`` snapshot,
then drives steps through a control block in shared memory. The functions keep
DeepSpeed's names and arguments (``ops/csrc/adam/cpu_adam.cpp`` in its wheel):

- in the optimizer process: ``zenflow_adam_create(optimizer_id, affinity)`` -> handle,
  ``zenflow_adam_register_group(handle, param, grad0, grad1, exp_avg0, exp_avg1,
  exp_avg_sq0, exp_avg_sq1, stale)``, ``zenflow_adam_run_worker(handle, ctrl_ptr)``
  (returns on the exit command), ``zenflow_adam_destroy(handle)``;
- in the training process: ``zenflow_adam_ctrl_size()``, ``zenflow_adam_ctrl_init(ctrl_ptr,
  num_groups)``, ``zenflow_adam_submit(ctrl_ptr, now_state, step, lr, beta1, beta2, eps,
  weight_decay, bias_correction)`` (lists, one entry per group),
  ``zenflow_adam_wait(ctrl_ptr, timeout_s)`` -> bool, ``zenflow_adam_ctrl_exit(ctrl_ptr)``.

A step takes, for every group, the Adam step of ``adam_update`` (AdamW or L2 decay as the
``create_adam`` id says) on the gradient and states at ``now_state``, then copies the
parameter into ``stale``; the results are bit-identical to ``adam_update`` on the same
tensors. The control block is an :mod:`accel.ops.step_channel`: a ring of command slots,
because ZenFlow's engine submits step k while step k - 1 may still run (after warm-up it
waits one step behind), which a single slot would let it overwrite mid-read. Where
DeepSpeed's differ:

- an error in the optimizer process (a bad dtype, a size mismatch) is raised by the
  training process's next ``zenflow_adam_wait`` with its message; DeepSpeed's worker dies
  and the training process learns it from a 60 s poll of the process;
- the worker returns (raising) when the process that started it is gone, instead of
  waiting for ever as an orphan;
- a wrong control-block address is a ``ValueError`` (DeepSpeed's dereferences it);
- the step runs accel's kernels on ``len(affinity)`` threads (DeepSpeed's ZenFlow has
  already pinned the optimizer process to those cores); DeepSpeed pins each thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from accel.ops import step_channel

# How often an idle worker checks that the training process still exists.
_PARENT_CHECK_SECONDS = 1.0
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class _GroupFailed(RuntimeError):
    """A group's step raised; the message names the group and the error."""


@dataclass(frozen=True)
class _Group:
    param: torch.Tensor
    grads: tuple[torch.Tensor, torch.Tensor]
    exp_avgs: tuple[torch.Tensor, torch.Tensor]
    exp_avg_sqs: tuple[torch.Tensor, torch.Tensor]
    stale: torch.Tensor | None


@dataclass
class _Worker:
    optimizer_id: int
    threads: int
    groups: list[_Group]


def _check_group(tensors: dict[str, object]) -> None:
    param = tensors["param"]
    if not isinstance(param, torch.Tensor):
        raise TypeError(f"param must be a torch.Tensor, got {type(param).__name__}")
    for name, tensor in tensors.items():
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError(f"{name} must be a contiguous CPU tensor, got {tensor.device}")
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {tensor.dtype}")
        if tensor.numel() != param.numel():
            raise ValueError(
                f"{name} has {tensor.numel()} elements, param {param.numel()}: a group's "
                "tensors must all be the size of its parameter"
            )
    stale = tensors["stale"]
    if isinstance(stale, torch.Tensor) and stale.dtype != param.dtype:
        raise TypeError(f"stale must have param's dtype {param.dtype}, got {stale.dtype}")


class ZenFlowAdamFunctions:
    """The ``zenflow_adam_*`` functions; mixed into accel's ``cpu_adam`` module, whose
    ``adam_update`` runs each group's step."""

    def __init__(self, adam_update: Callable[..., object]) -> None:
        """``adam_update``: the module's one-tensor Adam step, with DeepSpeed's arguments."""
        self._zenflow_adam_update = adam_update
        self._zenflow_workers: dict[int, _Worker] = {}
        self._zenflow_next_handle = 0
        self._zenflow_lock = threading.Lock()

    def _zenflow_worker(self, handle: int) -> _Worker:
        try:
            return self._zenflow_workers[handle]
        except KeyError:
            raise KeyError(
                f"no ZenFlow Adam with handle {handle!r}: call zenflow_adam_create() first "
                f"(handles: {sorted(self._zenflow_workers)})"
            ) from None

    def zenflow_adam_create(self, optimizer_id: int, zf_affinity: Sequence[int]) -> int:
        """A handle for the groups one optimizer process steps with ``create_adam`` id
        ``optimizer_id``, on ``len(zf_affinity)`` threads."""
        cores: list[object] = list(zf_affinity)
        if not all(isinstance(core, int) and core >= 0 for core in cores):
            raise ValueError(f"zf_affinity must list core numbers (ints >= 0), got {cores!r}")
        with self._zenflow_lock:
            handle = self._zenflow_next_handle
            self._zenflow_next_handle += 1
            self._zenflow_workers[handle] = _Worker(int(optimizer_id), max(1, len(cores)), [])
        return handle

    def zenflow_adam_register_group(
        self,
        handle: int,
        param: torch.Tensor,
        grad0: torch.Tensor,
        grad1: torch.Tensor,
        exp_avg0: torch.Tensor,
        exp_avg1: torch.Tensor,
        exp_avg_sq0: torch.Tensor,
        exp_avg_sq1: torch.Tensor,
        stale: torch.Tensor | None,
    ) -> None:
        """Add a parameter group: its double-buffered gradients and Adam states, and the
        buffer each step copies the updated parameter into (None: no copy)."""
        worker = self._zenflow_worker(handle)
        _check_group({
            "param": param, "grad0": grad0, "grad1": grad1, "exp_avg0": exp_avg0,
            "exp_avg1": exp_avg1, "exp_avg_sq0": exp_avg_sq0, "exp_avg_sq1": exp_avg_sq1,
            "stale": stale,
        })  # fmt: skip
        worker.groups.append(
            _Group(param, (grad0, grad1), (exp_avg0, exp_avg1), (exp_avg_sq0, exp_avg_sq1), stale)
        )

    def zenflow_adam_destroy(self, handle: int) -> None:
        """Forget a handle and its groups."""
        with self._zenflow_lock:
            self._zenflow_workers.pop(handle, None)

    def zenflow_adam_ctrl_size(self) -> int:
        """Bytes of the control block (a shared uint8 tensor of this size)."""
        return step_channel.channel_bytes()

    def zenflow_adam_ctrl_init(self, control_ptr: int, num_groups: int) -> None:
        """Prepare the control block for ``num_groups`` groups (before the worker starts)."""
        step_channel.init(control_ptr, num_groups)

    def zenflow_adam_submit(
        self,
        control_ptr: int,
        now_state: int,
        step: int,
        lr: Sequence[float],
        beta1: Sequence[float],
        beta2: Sequence[float],
        eps: Sequence[float],
        weight_decay: Sequence[float],
        bias_correction: Sequence[int],
    ) -> None:
        """Queue one step over the buffers at ``now_state``; returns at once."""
        columns = {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps}
        columns |= {"weight_decay": weight_decay, "bias_correction": bias_correction}
        lengths = {name: len(column) for name, column in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"one entry per group in every list, got lengths {lengths}")
        rows = zip(lr, beta1, beta2, eps, weight_decay, bias_correction, strict=True)
        groups = [
            step_channel.GroupHyper(rate, b1, b2, epsilon, decay, bool(flag))
            for rate, b1, b2, epsilon, decay, flag in rows
        ]
        step_channel.submit(control_ptr, now_state, step, groups)

    def zenflow_adam_wait(self, control_ptr: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for one submitted step: False on timeout,
        ``RuntimeError`` when the optimizer process failed it."""
        return step_channel.wait(control_ptr, timeout_s)

    def zenflow_adam_ctrl_exit(self, control_ptr: int) -> None:
        """Ask the worker to return once the steps before this are done."""
        step_channel.close(control_ptr)

    def zenflow_adam_run_worker(self, handle: int, control_ptr: int) -> None:
        """Run the submitted steps until the exit command (in the optimizer process)."""
        worker = self._zenflow_worker(handle)
        parent = os.getppid()
        threads = torch.get_num_threads()
        torch.set_num_threads(worker.threads)  # this thread's OpenMP and torch's pool
        try:
            while True:
                command = step_channel.next_command(control_ptr, _PARENT_CHECK_SECONDS)
                if command == "exit":
                    return
                if command is None:
                    if os.getppid() != parent:
                        raise RuntimeError(
                            f"ZenFlow optimizer worker: the training process (pid {parent}) "
                            "exited without the exit command; stopping"
                        )
                    continue
                try:
                    self._zenflow_step(worker, command)
                except Exception as error:
                    failure = error if isinstance(error, _GroupFailed) else repr(error)
                    step_channel.complete(control_ptr, f"step {command.step}, {failure}")
                    raise
                step_channel.complete(control_ptr)
        finally:
            torch.set_num_threads(threads)

    def _zenflow_step(self, worker: _Worker, command: step_channel.StepCommand) -> None:
        if len(command.groups) != len(worker.groups):
            raise ValueError(
                f"the control block carries {len(command.groups)} groups, the worker has "
                f"{len(worker.groups)} registered"
            )
        state = command.state_index
        for index, (group, hyper) in enumerate(zip(worker.groups, command.groups, strict=True)):
            try:
                self._zenflow_adam_update(
                    worker.optimizer_id, command.step, hyper.lr, hyper.beta1, hyper.beta2,
                    hyper.eps, hyper.weight_decay, hyper.bias_correction, group.param,
                    group.grads[state], group.exp_avgs[state], group.exp_avg_sqs[state],
                )  # fmt: skip
            except Exception as error:
                raise _GroupFailed(f"group {index}: {type(error).__name__}: {error}") from error
            if group.stale is not None:
                group.stale.copy_(group.param)
