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

    def _set_up_zenflow(self, adam_update: Callable[..., object]) -> None:
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
        ``optimizer_id``, on ``len(zf_affinity)`` threads.

        Args:
            optimizer_id: The ``create_adam`` id whose AdamW-or-L2 setting the steps use
                (looked up at each step).
            zf_affinity: The core numbers of the optimizer process; a step runs on as many
                threads (at least 1).

        Returns:
            A new handle.

        Raises:
            ValueError: An entry of ``zf_affinity`` is not an ``int`` >= 0.
        """
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
        buffer each step copies the updated parameter into (None: no copy).

        Args:
            handle: A handle from :meth:`zenflow_adam_create`.
            param: The parameter, a contiguous float32, bfloat16 or float16 CPU tensor.
            grad0: The gradient buffer of ``now_state`` 0, of ``param``'s size.
            grad1: The gradient buffer of ``now_state`` 1, of ``param``'s size.
            exp_avg0: The first moment of ``now_state`` 0, of ``param``'s size.
            exp_avg1: The first moment of ``now_state`` 1, of ``param``'s size.
            exp_avg_sq0: The second moment of ``now_state`` 0, of ``param``'s size.
            exp_avg_sq1: The second moment of ``now_state`` 1, of ``param``'s size.
            stale: A tensor of ``param``'s dtype and size, or ``None``.

        Raises:
            KeyError: ``handle`` is unknown.
            TypeError: ``param`` is not a ``torch.Tensor``, another argument is neither a
                ``torch.Tensor`` nor ``None``, a tensor is not float32, bfloat16 or float16, or
                ``stale``'s dtype is not ``param``'s.
            ValueError: A tensor is not a contiguous CPU tensor, or not ``param``'s size.
        """
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
        """Forget a handle and its groups.

        Args:
            handle: A handle from :meth:`zenflow_adam_create`; an unknown one is ignored.
        """
        with self._zenflow_lock:
            self._zenflow_workers.pop(handle, None)

    def zenflow_adam_ctrl_size(self) -> int:
        """Bytes of the control block (a shared uint8 tensor of this size)."""
        return step_channel.channel_bytes()

    def zenflow_adam_ctrl_init(self, control_ptr: int, num_groups: int) -> None:
        """Prepare the control block for ``num_groups`` groups (before the worker starts).

        Args:
            control_ptr: The address (``data_ptr()``) of a shared ``uint8`` tensor of
                :meth:`zenflow_adam_ctrl_size` bytes.
            num_groups: The number of groups each step carries, an ``int`` in ``[1, 1024]``.

        Raises:
            ValueError: ``control_ptr`` is not a positive ``int``, is misaligned, or is not
                writable memory of this process; or ``num_groups`` is not an ``int`` in
                ``[1, 1024]``.
        """
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
        """Queue one step over the buffers at ``now_state``; returns at once.

        Args:
            control_ptr: The control block's address (``data_ptr()`` of the shared tensor),
                prepared by :meth:`zenflow_adam_ctrl_init`.
            now_state: Which gradient and state buffers the step uses, 0 or 1.
            step: The number of the step, from 1.
            lr: Per group, the learning rate, a finite number >= 0.
            beta1: Per group, in ``[0, 1)``.
            beta2: Per group, in ``[0, 1)``.
            eps: Per group, a finite number > 0.
            weight_decay: Per group, a finite number >= 0.
            bias_correction: Per group, 1 (or True) to apply Adam's bias correction, 0 (or
                False) not to; any other value is a ``ValueError``.

        Raises:
            ValueError: The lists differ in length or do not hold one entry per group of the
                block; ``now_state`` is not 0 or 1; ``step`` is not an ``int`` >= 1; a group's
                ``lr`` or ``weight_decay`` is not a finite number >= 0, a beta is outside
                ``[0, 1)``, or ``eps`` is not a finite number > 0; or ``control_ptr`` is not the
                address of a prepared control block.
            RuntimeError: The optimizer process failed an earlier step (the message is its
                error), the exit command was already queued, or 4 commands already wait for the
                worker.
        """
        columns = {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps}
        columns |= {"weight_decay": weight_decay, "bias_correction": bias_correction}
        lengths = {name: len(column) for name, column in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"one entry per group in every list, got lengths {lengths}")
        rows = zip(lr, beta1, beta2, eps, weight_decay, bias_correction, strict=True)
        groups = [
            step_channel.GroupHyper(rate, b1, b2, epsilon, decay, flag)
            for rate, b1, b2, epsilon, decay, flag in rows
        ]
        step_channel.submit(control_ptr, now_state, step, groups)

    def zenflow_adam_wait(self, control_ptr: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for one submitted step: False on timeout,
        ``RuntimeError`` when the optimizer process failed it.

        Args:
            control_ptr: The control block's address (``data_ptr()`` of the shared tensor),
                prepared by :meth:`zenflow_adam_ctrl_init`.
            timeout_s: Seconds to wait, in ``[0, 1e9]``.

        Returns:
            ``True`` when a step finished, ``False`` when ``timeout_s`` passed first.

        Raises:
            RuntimeError: The optimizer process failed the step (the message is its error).
            ValueError: ``timeout_s`` is not a number in ``[0, 1e9]``, or ``control_ptr`` is not
                the address of a prepared control block.
        """
        return step_channel.wait(control_ptr, timeout_s)

    def zenflow_adam_ctrl_exit(self, control_ptr: int) -> None:
        """Ask the worker to return once the steps before this are done.

        Args:
            control_ptr: The control block's address (``data_ptr()`` of the shared tensor),
                prepared by :meth:`zenflow_adam_ctrl_init`.

        Raises:
            ValueError: ``control_ptr`` is not the address of a prepared control block.
            RuntimeError: The optimizer process failed an earlier step (the message is its
                error), the exit command was already queued, or 4 commands already wait for the
                worker.
        """
        step_channel.close(control_ptr)

    def zenflow_adam_run_worker(self, handle: int, control_ptr: int) -> None:
        """Run the submitted steps until the exit command (in the optimizer process).

        A step's error is reported to the training process through the control block (its
        next :meth:`zenflow_adam_wait` raises it) before it is raised here.

        Args:
            handle: A handle from :meth:`zenflow_adam_create`, with its groups registered.
            control_ptr: The control block's address in this process (the same shared tensor
                the training process prepared with :meth:`zenflow_adam_ctrl_init`).

        Raises:
            KeyError: ``handle`` is unknown.
            ValueError: ``control_ptr`` is not the address of a prepared control block, or a
                step carries a number of groups other than those registered.
            RuntimeError: A group's step failed (the message names the group and the error), or
                the training process exited without the exit command.
        """
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
