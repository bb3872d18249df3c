"""What the CPU optimizers share: collecting a group's tensors and states for one native call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import torch
from torch.optim.optimizer import ParamsT
from typing_extensions import override

from accel._torch_typed import foreach_add_
from accel._validate import Span, memory_extent, require_disjoint_spans
from accel.ops import isa
from accel.ops._hyperparameters import whole_number

Closure = Callable[[], float] | None


@dataclass
class GroupTensors:
    """The tensors of one param group that have gradients, in the kernel's layout."""

    params: list[torch.Tensor] = field(default_factory=list[torch.Tensor])
    indices: list[int] = field(default_factory=list[int])
    """Each parameter's index in its group's ``params`` (for errors)."""
    grads: list[torch.Tensor | None] = field(default_factory=list[torch.Tensor | None])
    states: dict[str, list[torch.Tensor]] = field(default_factory=dict[str, list[torch.Tensor]])
    steps: list[int] = field(default_factory=list[int])
    step_states: list[object] = field(default_factory=list[object])
    """Each parameter's ``state["step"]``, advanced once the step has succeeded."""


_Stepped = tuple[int, dict[str, Any], GroupTensors]
"""A param group a step updates: its index, the group, and its tensors with gradients."""


class CPUOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose step is one native call per param group.

    Subclasses name their fp32 state tensors (``state_names``), how a new state starts
    (``initial_state``) and the call (``_apply``). States use torch's key names and a
    ``step`` tensor, so ``state_dict()`` moves between this optimizer and torch's. As in
    ``torch.optim``, every hyper-parameter may be a one-element tensor, kept as such: its
    value is read at each step, so a scheduler may change it in place.
    """

    state_names: tuple[str, ...] = ()
    torch_flags: ClassVar[dict[str, bool | None]] = {"maximize": False}
    """The flags torch's optimizer of the same algorithm keeps in each param group, at
    torch's defaults: every group gets them, so ``torch.optim`` loads this ``state_dict()``."""
    unsupported_flags: tuple[str, ...] = ("maximize",)
    """The flags a group may not set (to a true value): the step does not implement them."""
    _disjoint_layout: list[tuple[int, int]] | None = None
    """The address and size of every parameter the last step found disjoint across groups."""

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        # A subclass's own value for a flag wins over torch's default.
        flags = {name: value for name, value in self.torch_flags.items() if name not in defaults}
        super().__init__(params, {**defaults, **flags})

    def initial_state(self, group: dict[str, Any], param: torch.Tensor) -> dict[str, torch.Tensor]:
        """Fresh fp32 state tensors for ``param`` (zeros unless overridden)."""
        return {name: torch.zeros(param.shape, dtype=torch.float32) for name in self.state_names}

    def _tensors(self, group_index: int, group: dict[str, Any]) -> GroupTensors:
        for flag in self.unsupported_flags:
            if group.get(flag):
                raise ValueError(
                    f"param_groups[{group_index}] sets {flag}=True, which "
                    f"{type(self).__name__} does not implement"
                )
        tensors = GroupTensors(states={name: [] for name in self.state_names})
        for param_index, param in enumerate(group["params"]):
            if param.grad is None:
                continue  # as torch.optim does: frozen or unused parameters are skipped
            state = self.state[param]
            if not state:
                state["step"] = torch.tensor(0.0)
                state.update(self.initial_state(group, param))
            if "step" not in state:
                where = f"param_groups[{group_index}] params[{param_index}]"
                raise ValueError(
                    f"{where}: the state has no 'step' (keys: {sorted(state)}); was it loaded "
                    f"from another optimizer than {type(self).__name__}?"
                )
            for name in self.state_names:
                value = state.get(name)
                if not isinstance(value, torch.Tensor):
                    where = f"param_groups[{group_index}] params[{param_index}]"
                    raise ValueError(
                        f"{where}: the state has no tensor {name!r} (keys: {sorted(state)}); "
                        f"was it loaded from another optimizer than {type(self).__name__}?"
                    )
                if value.shape != param.shape:
                    where = f"param_groups[{group_index}] params[{param_index}]"
                    raise ValueError(
                        f"{where}: state {name!r} has shape {tuple(value.shape)}, the "
                        f"parameter {tuple(param.shape)}"
                    )
                if value.dtype != torch.float32 or not value.is_contiguous():
                    state[name] = value = value.to(torch.float32).contiguous()
                tensors.states[name].append(value)
            tensors.params.append(param)
            tensors.indices.append(param_index)
            tensors.grads.append(param.grad)
            # The step being taken; the counters advance only once the step has succeeded.
            tensors.steps.append(_step_count(state["step"], group_index, param_index) + 1)
            tensors.step_states.append(state["step"])
        return tensors

    def _apply(self, group: dict[str, Any], tensors: GroupTensors) -> None:
        """Run the native step for one group (each concrete optimizer defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define _apply")

    @torch.no_grad()
    @override
    def step(self, closure: Closure = None) -> float | None:  # type: ignore[override]
        """Take one optimization step.

        Args:
            closure: Re-evaluates the model and returns the loss, as in ``torch.optim``.

        Returns:
            The closure's loss, or ``None`` without a closure.

        Raises:
            ValueError: A group sets a flag this optimizer does not implement, a parameter's
                state is missing or misshapen, a hyperparameter is out of range, two
                parameters share memory (in one group or in two), or ``ACCEL_CPU_ISA``
                holds a bad value before the kernels' first load.
            TypeError: A parameter or gradient has a dtype the native step does not take.
        """
        # Not per group: a bad ACCEL_CPU_ISA before the kernels' first load is no group's.
        isa.check_before_loading("accel.ops._cpu_optim")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups: list[_Stepped] = []
        for index, group in enumerate(self.param_groups):
            tensors = self._tensors(index, group)
            if tensors.params:
                groups.append((index, group, tensors))
        self._require_disjoint_groups(groups)
        for index, group, tensors in groups:
            try:
                self._apply(group, tensors)
            except (TypeError, ValueError) as error:
                # A parameter listed twice fails the kernels' overlap check (its states are
                # one pair of tensors); looked for only then, off the step's hot path.
                twice = _listed_twice(group["params"])
                if twice is not None:
                    raise ValueError(
                        f"param_groups[{index}] lists one parameter twice (params[{twice[0]}] "
                        f"and params[{twice[1]}])"
                    ) from error
                raise type(error)(f"param_groups[{index}]: {error}") from error
            _advance(tensors, self.state)
        return loss

    def _require_disjoint_groups(self, groups: list[_Stepped]) -> None:
        """Refuse parameters of two groups that share memory: each group's native call
        refuses those within it, but two calls would step the shared elements twice.

        Checked before any group steps, and only when the parameters' memory changed since
        the last check: comparing their addresses and sizes takes ~0.13 us a parameter
        (25 us for 200, about 1% of their step), the check itself, a sort by address and
        one sweep, ~0.9 us a parameter.
        """
        if len(groups) < 2:
            return
        layout: list[tuple[int, int]] | None
        try:
            layout = [(p.data_ptr(), p.nbytes) for _, _, tensors in groups for p in tensors.params]
        except RuntimeError:  # a tensor without storage (sparse): its group's call names it
            layout = None
        if layout is not None and layout == self._disjoint_layout:
            return
        spans: list[Span] = []
        names: list[str] = []
        for group_index, _, tensors in groups:
            for param_index, param in zip(tensors.indices, tensors.params, strict=True):
                # Not a dense CPU tensor: its group's native call refuses it, by name.
                if param.is_cpu and param.layout == torch.strided and param.numel():
                    start = param.data_ptr()
                    spans.append((start, start + memory_extent(param), len(names), True))
                    names.append(f"param_groups[{group_index}] params[{param_index}]")
        require_disjoint_spans(spans, names.__getitem__)
        self._disjoint_layout = layout

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict``, keeping the saved states in fp32.

        torch casts floating-point states to each parameter's dtype; for bf16 or fp16
        parameters that would round the fp32 moments this optimizer keeps (and the next
        step would widen the rounded values back). The saved tensors are taken as the
        load pre-hooks leave them, before the post-hooks run.
        """
        loading: list[dict[str, Any]] = []

        def seen(_: torch.optim.Optimizer, final: dict[str, Any]) -> None:
            loading.append(final)

        def keep_fp32(_: torch.optim.Optimizer) -> None:
            self._keep_fp32(loading[-1])

        # Registered around the call: the pre-hook after the user's, the post-hook before.
        last_pre = self.register_load_state_dict_pre_hook(seen)
        first_post = self.register_load_state_dict_post_hook(keep_fp32, prepend=True)
        try:
            super().load_state_dict(state_dict)
        finally:
            last_pre.remove()
            first_post.remove()

    def _keep_fp32(self, state_dict: dict[str, Any]) -> None:
        saved: dict[Any, dict[str, Any]] = state_dict["state"]
        ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, param in zip(ids, params, strict=True):
            for name in self.state_names:
                value = saved.get(saved_id, {}).get(name)
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    self.state[param][name] = value.detach().to(
                        param.device, torch.float32, copy=True
                    )


def _listed_twice(params: list[torch.Tensor]) -> tuple[int, int] | None:
    """The first two indices of one parameter listed twice in ``params``, or None."""
    first: dict[int, int] = {}
    for index, param in enumerate(params):
        earlier = first.setdefault(id(param), index)
        if earlier != index:
            return earlier, index
    return None


def hyper(group: dict[str, Any], defaults: dict[str, Any], key: str) -> Any:
    """``group[key]``, or the optimizer's default for a group loaded without it."""
    return group.get(key, defaults[key])


def _step_count(value: object, group_index: int, param_index: int) -> int:
    """A state's ``step`` as a count, or an error naming it: an integer (NumPy's too), a
    whole float, or a one-element tensor holding one (torch keeps it as a float tensor)."""
    count = whole_number(value)
    if count is None or count < 0:
        raise ValueError(
            f"param_groups[{group_index}] params[{param_index}]: state 'step' must be a whole "
            f"number >= 0, got {value!r}"
        )
    return count


def _advance(tensors: GroupTensors, state: Any) -> None:
    """Count the step taken: in one call where every ``step`` is a floating-point tensor,
    as torch's own optimizers keep them (``_foreach_add_`` groups them by device)."""
    steps = tensors.step_states
    if all(type(v) is torch.Tensor and v.is_floating_point() for v in steps):
        foreach_add_(cast("list[torch.Tensor]", steps), 1)
        return
    for param in tensors.params:
        state[param]["step"] += 1
