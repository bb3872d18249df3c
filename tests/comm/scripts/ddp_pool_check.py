"""Run under torchrun on 2 ranks: DDP's buckets moved into the "accel" group's pool.

Every case trains the same model twice, with DDP on an "accel" group and on a gloo group,
on the same batches, and compares losses and parameters bit for bit (2 ranks: each
gradient is one sum of two terms, in either order the same bits). It also records how many
buckets moved into the pool and checks what must stay where it is. Prints one JSON line on
rank 0.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import accel.process_group  # registers "accel"
import accel.report
from accel.comm import _segment
from accel.optim import CPUAdam

STEPS = 5
same_everywhere = settings(
    derandomize=True, database=None, deadline=None, max_examples=8,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip


def _mlp(widths: list[int], seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for before, after in itertools.pairwise(widths):
        layers += [torch.nn.Linear(before, after), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1]).to(dtype)


class _WithUnused(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = _mlp([32, 64, 8], 3)
        self.unused = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


class _Toggled(torch.nn.Module):
    """A model whose ``extra`` layer is used only when ``use_extra``; registered first,
    it is DDP's last bucket, a bucket of its own with a cap below its size."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(12)
        self.extra = torch.nn.Linear(48, 64, bias=False)
        self.used = _mlp([48, 64, 8], 11)
        self.use_extra = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.used(x)
        return out + self.extra(x)[:, :8] if self.use_extra else out


Step = Callable[[DDP, torch.Tensor], torch.Tensor]


def _plain(ddp: DDP, x: torch.Tensor) -> torch.Tensor:
    loss = ddp(x).float().square().mean()
    loss.backward()
    return loss


def _accumulating(ddp: DDP, x: torch.Tensor) -> torch.Tensor:
    with ddp.no_sync():  # the first half's gradients stay local, added to the second's
        ddp(x[: len(x) // 2]).float().square().mean().backward()
    loss = ddp(x[len(x) // 2 :]).float().square().mean()
    loss.backward()
    return loss


def _train(
    make: Callable[[], torch.nn.Module],
    group: dist.ProcessGroup,
    width: int,
    step: Step = _plain,
    steps: int = STEPS,
    after_backward: Callable[[int, DDP], None] | None = None,
    optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
    **options: Any,
) -> tuple[list[float], list[torch.Tensor], DDP]:
    """Train ``make()`` under DDP on ``group``; the losses, the parameters, the model."""
    model = make()
    ddp = DDP(model, process_group=group, **options)
    opt = (optimizer or (lambda params: torch.optim.SGD(params, lr=0.05)))(ddp.parameters())
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    dtype = next(model.parameters()).dtype
    losses = []
    for index in range(steps):
        loss = step(ddp, torch.randn(16, width, generator=gen).to(dtype))
        if after_backward is not None:
            after_backward(index, ddp)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()], ddp


def _shows(holder: torch.Tensor, grad: torch.Tensor) -> bool:
    """Whether ``holder`` is memory ``grad`` lies in, holding its values (the bucket's
    export holds every parameter's)."""
    start, size = grad.data_ptr() - holder.data_ptr(), grad.element_size()
    if start < 0 or start % size:
        return False
    flat = holder.reshape(-1)[start // size :][: grad.numel()]
    return torch.equal(flat, grad.reshape(-1))


@torch.jit.script
def _reduce_statistics(buffers: list[torch.Tensor], group: str, grad: torch.Tensor) -> torch.Tensor:
    """A TorchScript tensor hook: no Python frame, so its all-reduce reaches the group
    from the autograd engine's entry, as DDP's reducer does."""
    buffers[0].add_(grad.abs().sum())
    torch.ops._c10d_functional.wait_tensor(
        torch.ops._c10d_functional.all_reduce_(buffers[0], "sum", group)
    )
    return grad


def _moved(group: dist.ProcessGroup) -> int:
    return int(group.promotions.moved_buffers)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _debug_lines() -> Iterator[list[str]]:
    """The accel.comm logger's debug lines while inside."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("accel.comm")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main() -> None:
    dist.init_process_group("accel")
    rank = dist.get_rank()
    world = dist.group.WORLD
    assert world is not None
    gloo = dist.new_group(backend="gloo")
    facts: dict[str, Any] = {}

    def compare(name: str, make: Callable[[], torch.nn.Module], width: int, **kw: Any) -> int:
        """Train on accel and on gloo; record whether they agree; the buckets moved."""
        before = _moved(world)
        ours = _train(make, world, width, **kw)
        theirs = _train(make, gloo, width, **kw)
        same = ours[0] == theirs[0] and all(
            torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True)
        )
        facts.setdefault("same_as_gloo", {})[name] = same
        moved = _moved(world) - before
        facts.setdefault("moved", {})[name] = moved
        return moved

    wide = [48, 256, 256, 256, 8]  # 4 Linear layers; 20 KiB buckets hold about one each
    compare("default", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02)
    compare("bucket_view", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02,
            gradient_as_bucket_view=True)  # fmt: skip
    compare("unused", _WithUnused, 32, find_unused_parameters=True)
    compare("static_graph", lambda: _mlp(wide, 2), 48, static_graph=True)
    compare("no_sync", lambda: _mlp(wide, 4), 48, step=_accumulating)
    compare("cap_below_a_parameter", lambda: _mlp(wide, 5), 48, bucket_cap_mb=0.001)
    compare("bf16", lambda: _mlp(wide, 6, torch.bfloat16), 48)
    # accel's native Adam reads each .grad (a view of a moved bucket) afresh every step.
    compare("accel_adam", lambda: _mlp(wide, 10), 48, gradient_as_bucket_view=True,
            optimizer=lambda params: CPUAdam(params, lr=1e-3))  # fmt: skip

    # Someone outside DDP holds a parameter's gradient memory from step `first` on: that
    # bucket stays where it is, and the holders keep seeing the gradients DDP writes. Each
    # case trains twice (accel, then gloo): follows[case] gets one answer per run.
    follows: dict[str, list[bool]] = {}

    def holding(
        case: str,
        take: Callable[[torch.Tensor], list[Any]],
        grad_of: Callable[[Any], torch.Tensor | None] = lambda model: model[0].weight.grad,
        first: int = 1,
        then: Callable[[int, Any], None] = lambda index, model: None,
    ) -> Callable[[int, DDP], None]:
        holders: list[Any] = []

        def after_backward(index: int, ddp: DDP) -> None:
            grad = grad_of(ddp.module)
            if index == first:
                assert grad is not None
                holders[:] = take(grad)
            elif index == STEPS - 1:
                assert grad is not None
                seen = [torch.from_numpy(h) if isinstance(h, np.ndarray) else h for h in holders]
                follows.setdefault(case, []).append(all(_shows(h, grad) for h in seen))
            then(index, ddp.module)

        return after_backward

    # A numpy array (through .numpy(), taken after DDP rebuilt its buckets), and DLPack
    # exports of the .grad itself, which make no tensor on the bucket's storage.
    compare("numpy_holder", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02,
            gradient_as_bucket_view=True,
            after_backward=holding("numpy_holder", lambda g: [g.numpy()]))  # fmt: skip
    compare("dlpack_holder", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02,
            gradient_as_bucket_view=True, after_backward=holding(
                "dlpack_holder", lambda g: [torch.from_dlpack(g), np.from_dlpack(g)]))  # fmt: skip

    # A DLPack export of the bucket itself (a bucket-view .grad's base), which holds the
    # bucket tensor and not a new tensor on its storage.
    compare("base_dlpack_holder", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02,
            gradient_as_bucket_view=True, after_backward=holding(
                "base_dlpack_holder", lambda g: [np.from_dlpack(g._base)]))  # fmt: skip

    # A DLPack array of a view of a .grad, held while its parameter goes unused (its .grad
    # None, so its part of the bucket is unknown) and then is used again.
    def use_extra_at_the_ends(index: int, model: Any) -> None:
        model.use_extra = index >= STEPS - 2  # unused in the steps between

    compare("unused_holder", _Toggled, 48, bucket_cap_mb=0.01, find_unused_parameters=True,
            gradient_as_bucket_view=True, after_backward=holding(
                "unused_holder", lambda g: [np.from_dlpack(g.view(-1))],
                grad_of=lambda model: model.extra.weight.grad, first=0,
                then=use_extra_at_the_ends))  # fmt: skip
    facts["holders_follow"] = follows

    # Another thread reads every .grad while backward runs: the memory a bucket leaves is
    # still allocated for a read that started on it (it was freed at once, and the thread
    # crashed the process).
    def reading_thread() -> Callable[[int, DDP], None]:
        stop = threading.Event()

        def read(model: torch.nn.Module) -> None:
            while not stop.is_set():
                for parameter in model.parameters():
                    grad = parameter.grad
                    if grad is not None:
                        grad.clone()

        def after_backward(index: int, ddp: DDP) -> None:
            if index == 0:
                threading.Thread(target=read, args=(ddp.module,), daemon=True).start()
            elif index == STEPS - 1:
                stop.set()

        return after_backward

    def large() -> torch.nn.Module:
        # 64 MiB buckets: above glibc's largest mmap threshold, so freeing one unmaps it
        # and a read still on it faults.
        torch.manual_seed(12)
        return torch.nn.Sequential(*(torch.nn.Linear(4096, 4096, bias=False) for _ in range(2)))

    compare("thread_reader", large, 4096, bucket_cap_mb=64, gradient_as_bucket_view=True,
            after_backward=reading_thread())  # fmt: skip

    # A TorchScript hook all-reduces a buffer of its own during backward, on a group with a
    # DDP model: it reaches the group as DDP's reducer does, but the buffer is not a bucket,
    # and a DLPack view of it keeps seeing it.
    statistics = torch.zeros(1 << 16)
    statistics_view = np.from_dlpack(statistics)
    before = _moved(world)
    hooked = DDP(_mlp(wide, 11), process_group=world)
    for _ in range(STEPS):
        out = hooked(torch.randn(4, 48))
        out.register_hook(functools.partial(_reduce_statistics, [statistics], world.group_name))
        out.square().mean().backward()
    facts["moved"]["scripted_hook"] = _moved(world) - before
    facts["hook_buffer_stays"] = statistics_view.ctypes.data == statistics.data_ptr() and bool(
        np.array_equal(statistics_view, statistics.numpy())
    )
    del hooked

    # A DDP made with init_sync=False checks nothing through the group, and is known all
    # the same.
    compare("init_sync_off", lambda: _mlp(wide, 1), 48, bucket_cap_mb=0.02,
            gradient_as_bucket_view=True, init_sync=False)  # fmt: skip

    # A Python comm hook is not DDP's reducer: its buckets never move.
    before = _moved(world)
    model = DDP(_mlp(wide, 7), process_group=world)
    model.register_comm_hook(world, default_hooks.allreduce_hook)
    for _ in range(STEPS):
        model(torch.randn(4, 48)).square().mean().backward()
    facts["moved"]["comm_hook"] = _moved(world) - before

    # Direct calls on the same tensor: never moved.
    direct = torch.ones(8192)
    where = direct.data_ptr()
    for _ in range(3):
        dist.all_reduce(direct)
    facts["direct_call_stays"] = direct.data_ptr() == where and bool((direct == 8).all())

    # Hypothesis-drawn layouts: widths, bucket caps, bucket views.
    @given(
        widths=st.lists(st.integers(1, 160), min_size=2, max_size=5),
        cap=st.sampled_from([0.001, 0.01, 0.05, 25.0]),
        view=st.booleans(),
    )
    @same_everywhere
    def layouts(widths: list[int], cap: float, view: bool) -> None:
        name = f"layout {widths} cap {cap} view {view}"
        compare(name, lambda: _mlp(widths, 9), widths[0], bucket_cap_mb=cap,
                gradient_as_bucket_view=view)  # fmt: skip

    layouts()

    # A checkpoint saved and loaded mid-run: a new model and DDP continue from it.
    def resumed(group: dist.ProcessGroup) -> tuple[list[float], list[torch.Tensor]]:
        losses, _, ddp = _train(lambda: _mlp(wide, 8), group, 48, steps=3)
        saved = io.BytesIO()
        torch.save(ddp.module.state_dict(), saved)
        saved.seek(0)
        state = torch.load(saved)

        def restored() -> torch.nn.Module:
            model = _mlp(wide, 99)
            model.load_state_dict(state)
            return model

        more, params, _ = _train(restored, group, 48, steps=3)
        return losses + more, params

    ours, theirs = resumed(world), resumed(gloo)
    facts["same_as_gloo"]["checkpoint"] = ours[0] == theirs[0] and all(
        torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True)
    )

    # Opted out: no bucket moves on a group made while ACCEL_DDP_POOL=0.
    os.environ["ACCEL_DDP_POOL"] = "0"
    off = dist.new_group(backend="accel")
    del os.environ["ACCEL_DDP_POOL"]
    _train(lambda: _mlp(wide, 1), off, 48)
    facts["moved"]["opted_out"] = _moved(off)

    # A pool too small: the buckets stay, with a debug line saying why.
    os.environ["ACCEL_SHM_POOL_BYTES"] = str(64 << 10)
    small = dist.new_group(backend="accel")
    with _debug_lines() as lines:
        small_same = _train(lambda: _mlp(wide, 1), small, 48)[0]
    del os.environ["ACCEL_SHM_POOL_BYTES"]
    facts["moved"]["small_pool"] = _moved(small)
    facts["small_pool_said"] = any("stays out of the pool" in line for line in lines)
    facts["same_as_gloo"]["small_pool"] = small_same == _train(lambda: _mlp(wide, 1), gloo, 48)[0]

    # The pool's blocks come back when DDP drops its buckets, and the group can be
    # destroyed while DDP still holds a bucket in its pool.
    fresh = dist.new_group(backend="accel")
    _, _, ddp = _train(lambda: _mlp(wide, 1), fresh, 48, bucket_cap_mb=0.02)
    segment = _segment.segment_of(fresh)
    assert segment is not None
    communicator = segment.communicator
    facts["pool_taken"] = communicator.pool_bytes - communicator.pool_free_bytes
    facts["report"] = accel.report.collect().collectives  # says so while DDP holds them
    # Moved out again by share_memory_() (Hogwild's model.share_memory() on bucket views).
    promotions: Any = fresh.promotions  # type: ignore[attr-defined]
    pooled = len(promotions.pooled())
    viewed = dist.new_group(backend="accel")
    _, _, shared = _train(lambda: _mlp(wide, 1), viewed, 48, bucket_cap_mb=0.02,
                          gradient_as_bucket_view=True)  # fmt: skip
    in_pool = len(viewed.promotions.pooled())  # type: ignore[attr-defined]
    shared(torch.randn(2, 48)).sum().backward()  # .grads set again: views of the buckets
    shared.module.share_memory()
    facts["shared_leave_the_pool"] = [pooled > 0, in_pool > 0,
                                      viewed.promotions.pooled() == []]  # type: ignore[attr-defined]  # fmt: skip
    del shared
    dist.destroy_process_group(fresh)
    ddp.module(torch.randn(2, 48)).sum().backward()  # the buckets still work, unmapped later
    del ddp, segment
    gc.collect()
    facts["pool_back"] = communicator.pool_bytes - communicator.pool_free_bytes

    if rank == 0:
        print(json.dumps(facts))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
