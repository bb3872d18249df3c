"""One rank of a 2-rank job: the patterns that once hung, poisoned a group or wrote into
memory a rank had been told was free. Started by tests/comm/test_reliability.py as
``python reliability_check.py STORE_FILE RANK OUT_DIR``; writes ``rank<R>.json``.

Each case runs on groups of its own (made up front, in the same order on both ranks, as
``new_group`` requires), so a case that breaks its groups cannot spoil the next one. A
case that should finish at once gets a 10 s group timeout: a hang shows as a timeout
error in the report, not as a test that waits 30 minutes.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  # registers "accel"
from accel import comm
from accel.comm import _segment
from accel.comm._nodes import NODE_ENV, node_identity

SHORT = timedelta(seconds=10)


def _error(call: Any) -> str | None:
    """``call()``'s error as "Type: message", or None when it returned."""
    try:
        call()
    except Exception as error:  # the report says what it was
        return f"{type(error).__name__}: {error}"
    return None


def two_groups_first_used_from_two_threads(rank: int, backend: str) -> dict[str, Any]:
    """Each rank starts the two threads in the other order: set-up of one group must not
    wait for the other's."""
    groups = [dist.new_group([0, 1], backend=backend, timeout=SHORT) for _ in range(2)]
    results: list[Any] = [None, None]

    def use(index: int) -> None:
        def call() -> None:
            tensor = torch.full((64,), float(rank + 1))
            if backend == "accel":
                dist.all_reduce(tensor, group=groups[index])
            else:
                comm.all_reduce_(tensor, group=groups[index])
            results[index] = tensor[0].item()

        error = _error(call)
        if error is not None:
            results[index] = error

    order = [0, 1] if rank == 0 else [1, 0]
    threads = [threading.Thread(target=use, args=(index,)) for index in order]
    for thread in threads:
        thread.start()
        time.sleep(0.3)  # the first thread is inside its group's set-up
    for thread in threads:
        thread.join(timeout=30)
    return {"sums": results, "alive": [t.is_alive() for t in threads]}


def async_reductions_on_two_groups_in_either_order(rank: int) -> dict[str, Any]:
    """Each rank issues an async all-reduce on each of two new groups, in the other
    order: neither group's set-up may wait for the other's (gloo's do not). A short
    timeout turns a hang into a reported error."""
    groups = [
        dist.new_group([0, 1], backend="accel", timeout=timedelta(seconds=3)) for _ in range(2)
    ]
    tensors = [torch.full((64,), float(rank + 1)) for _ in range(2)]
    order = [0, 1] if rank == 0 else [1, 0]
    works = {i: dist.all_reduce(tensors[i], group=groups[i], async_op=True) for i in order}
    errors = [_error(works[i].wait) for i in range(2)]
    results = _error(lambda: works[0].result()) or [t[0].item() for t in works[0].result()]
    return {"sums": [t[0].item() for t in tensors], "errors": errors, "result": results}


def async_reductions_on_two_gloo_groups_in_either_order(rank: int) -> dict[str, Any]:
    """The same with each rank on a node of its own (simulated with ACCEL_NODE_ID): the
    groups are gloo's, which each group's first, queued, reduction finds out; the
    reductions issued after it go straight to gloo."""
    os.environ[NODE_ENV] = f"node{rank}"
    node_identity.cache_clear()
    try:
        report = async_reductions_on_two_groups_in_either_order(rank)
        groups = [dist.new_group([0, 1], backend="accel", timeout=SHORT) for _ in range(2)]
        tensors = [torch.full((64,), float(rank + 1)) for _ in range(2)]
        order = [0, 1] if rank == 0 else [1, 0]
        works = [dist.all_reduce(tensors[i], group=groups[i], async_op=True) for i in order]
        for work in works:
            work.wait()
        again = [torch.full((64,), float(rank + 1)) for _ in range(2)]
        for tensor, group in zip(again, groups, strict=True):
            dist.all_reduce(tensor, group=group)
        report["again"] = [t[0].item() for t in again]
        report["levels"] = [
            (group.uses_shared_memory(), _segment.spanning_of(group) is not None)
            for group in groups
        ]
        return report
    finally:
        del os.environ[NODE_ENV]
        node_identity.cache_clear()


def late_peer_and_a_pooled_tensor(rank: int) -> dict[str, Any]:
    """Rank 0 gives up on a pooled all-reduce after 0.5 s and refills its tensor; rank 1
    comes after that. Rank 0's tensor must keep what rank 0 wrote."""
    group = dist.new_group([0, 1], timeout=SHORT)
    side = dist.new_group([0, 1], backend="gloo")  # to meet after the failure
    tensor = comm.shared_empty(1 << 16, group=group).fill_(1.0)
    comm.all_reduce_(tensor, group=group)  # set up, and the path works: 2.0
    report: dict[str, Any] = {"first": tensor[0].item()}
    tensor.fill_(1.0)

    def attempt() -> None:
        report["error"] = _error(lambda: comm.all_reduce_(tensor, group=group, timeout=0.5))

    if rank == 0:
        attempt()
        tensor.fill_(42.0)
    dist.barrier(group=side)  # rank 0 has given up and refilled its tensor
    if rank == 1:
        attempt()
    dist.barrier(group=side)  # rank 1 has made its attempt
    time.sleep(0.2)
    report["values"] = sorted(set(tensor.tolist()))
    return report


def a_slow_reader_of_a_pooled_tensor(rank: int) -> dict[str, Any]:
    """A pooled all-gather where rank 0's deadline (1 ms) passes while rank 1 still copies
    rank 0's tensor into fresh pages: rank 0 must wait for it, not report a failure and
    let its caller refill the tensor under the copy."""
    group = dist.new_group([0, 1], timeout=SHORT)
    numel = 8 << 20  # 32 MiB of float32 per rank
    tensor = comm.shared_empty(numel, group=group).fill_(float(rank + 1))
    comm.all_gather_into_tensor_(torch.empty(2 * numel), tensor, group=group)  # set up
    out = torch.zeros(2 * numel) if rank == 0 else torch.empty(2 * numel)  # rank 1's: unfaulted
    dist.barrier(group=dist.new_group([0, 1], backend="gloo"))
    if rank == 0:
        # Rank 1 waits at the first gate by then (no call tells when it does: the time is
        # ample even on a busy machine): both start copying together.
        time.sleep(1.5)
    error = _error(
        lambda: comm.all_gather_into_tensor_(
            out, tensor, group=group, timeout=0.001 if rank == 0 else 10
        )
    )
    tensor.fill_(-99.0)  # what a caller told the step failed may do at once
    return {"error": error, "values": sorted(set(out.tolist()))}


def a_destroyed_group_used_again(rank: int) -> dict[str, Any]:
    """What still holds a destroyed "accel" group (FSDP2's or ZeRO's pooled buffers) and
    calls accel.comm with it gets an error that says so; its pooled tensor stays valid."""
    group = dist.new_group([0, 1], backend="accel", timeout=SHORT)
    pooled = comm.shared_empty(64, group=group).fill_(float(rank + 1))
    comm.all_reduce_(pooled, group=group)
    dist.destroy_process_group(group)
    pooled += 1
    gloo = dist.new_group([0, 1], backend="gloo", timeout=SHORT)
    dist.destroy_process_group(gloo)
    return {
        "shared_empty": _error(lambda: comm.shared_empty(8, group=group)),
        "all_reduce_": _error(lambda: comm.all_reduce_(torch.ones(4), group=group)),
        "broadcast_": _error(lambda: comm.broadcast_(torch.ones(4), 0, group=group)),
        "gloo_broadcast_": _error(lambda: comm.broadcast_(torch.ones(4), 0, group=gloo)),
        "not_a_group": _error(lambda: comm.all_reduce_(torch.ones(4), group="world")),  # type: ignore[arg-type]
        "an_int": _error(lambda: comm.broadcast_(torch.ones(4), 0, group=0)),  # type: ignore[arg-type]
        "pooled": pooled[0].item(),
    }


def local_errors_leave_the_group_usable(rank: int) -> dict[str, Any]:
    """What every rank gets wrong alike, before any byte moved, is gloo's answer, and the
    group goes on working."""
    groups = {
        name: dist.new_group([0, 1], backend=name, timeout=SHORT) for name in ("accel", "gloo")
    }
    return {name: _local_errors_on(group, rank) for name, group in groups.items()}


def _local_errors_on(group: Any, rank: int) -> dict[str, Any]:
    leaf = torch.full((8,), float(rank + 1), requires_grad=True)
    sparse = torch.sparse_coo_tensor([[rank, 3]], [1.0, float(rank + 1)], (4,))
    expanded = torch.ones(1).expand(4)
    cases = {
        "avg_leaf": lambda: dist.all_reduce(leaf, op=dist.ReduceOp.AVG, group=group),
        "sparse": lambda: dist.all_reduce(sparse, group=group),
        "expanded": lambda: dist.all_reduce(expanded, group=group),
    }
    outcome: dict[str, Any] = {}
    for case, call in cases.items():
        error = _error(call)
        outcome[case] = error.split(":")[0] if error else "ok"
    outcome["avg_leaf_value"] = leaf.detach()[0].item()
    outcome["sparse_value"] = sparse.to_dense().tolist()
    after = torch.full((8,), float(rank + 1))
    outcome["after"] = _error(lambda: dist.all_reduce(after, group=group)) or after[0].item()
    return outcome


def copies_written_back_and_overlapping_inputs(rank: int) -> dict[str, Any]:
    """What goes through a contiguous copy is written back as gloo writes (into an
    inference tensor, a leaf that requires grad), a dtype the segment does not sum keeps
    its logical result off the contiguous path, and an all-gather whose input lies in its
    output other than as this rank's block (past one segment slot) gathers the input."""
    group = dist.new_group([0, 1], backend="accel", timeout=SHORT)
    with torch.inference_mode():
        inference = (torch.arange(6.0).view(2, 3) * (rank + 1)).t()
    leaf = torch.arange(6.0).view(2, 3).t().requires_grad_()
    wide = torch.arange(8, dtype=torch.int64) * (rank + 1)
    n = 5 << 20  # 20 MiB of float32: more than one slot of the segment
    buffer = torch.full((2 * n + 1000,), float(rank + 1))
    gathered_input = buffer[1000 : 1000 + n]
    expected_gather = torch.cat([torch.full((n,), 1.0), torch.full((n,), 2.0)])
    outcome = {
        "inference": _error(lambda: dist.all_reduce(inference, group=group)),
        "leaf_broadcast": _error(lambda: dist.broadcast(leaf, src=0, group=group)),
        "int64_every_other": _error(lambda: comm.all_reduce_(wide[::2], group=group)),
        "gather": _error(
            lambda: comm.all_gather_into_tensor_(buffer[: 2 * n], gathered_input, group=group)
        ),
        "after": _error(lambda: dist.barrier(group=group)),
    }
    outcome["inference_value"] = inference.tolist()
    outcome["int64_value"] = wide.tolist()
    outcome["gather_right"] = bool(torch.equal(buffer[: 2 * n], expected_gather))
    return outcome


def a_rank_outside_the_group(rank: int) -> dict[str, Any]:
    group = dist.new_group([0], timeout=SHORT)  # rank 1 is not a member
    tensor = torch.full((4,), float(rank + 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reduced = _error(lambda: comm.all_reduce_(tensor, group=group))
        broadcast = _error(lambda: comm.broadcast_(tensor, 0, group=group))
        shared = _error(lambda: comm.shared_empty(4, group=group))
    return {
        "all_reduce": reduced,
        "broadcast": broadcast,
        "shared_empty": shared,
        "values": tensor.tolist(),
        "warned": sorted({str(w.message).split(" which")[0] for w in caught}),
    }


def a_bad_pool_size_on_one_rank(rank: int) -> dict[str, Any]:
    group = dist.new_group([0, 1], timeout=SHORT)
    if rank == 1:
        os.environ[_segment.POOL_ENV] = "lots"
    try:
        return {"error": _error(lambda: comm.all_reduce_(torch.ones(4), group=group))}
    finally:
        os.environ.pop(_segment.POOL_ENV, None)


def a_bad_node_id_on_one_rank(rank: int) -> dict[str, Any]:
    group = dist.new_group([0, 1], timeout=SHORT)
    before = os.environ.get(NODE_ENV)
    if rank == 1:
        os.environ[NODE_ENV] = "bad id"
    node_identity.cache_clear()
    try:
        return {"error": _error(lambda: comm.all_reduce_(torch.ones(4), group=group))}
    finally:
        os.environ.pop(NODE_ENV, None)
        if before is not None:
            os.environ[NODE_ENV] = before
        node_identity.cache_clear()


def a_pool_size_past_the_address_space(rank: int) -> dict[str, Any]:
    group = dist.new_group([0, 1], timeout=SHORT)
    os.environ[_segment.POOL_ENV] = str(2**63 - 4096)
    try:
        return {"error": _error(lambda: comm.all_reduce_(torch.ones(4), group=group))}
    finally:
        os.environ.pop(_segment.POOL_ENV, None)


def first_use_inside_torch_compile(rank: int) -> dict[str, Any]:
    groups = [dist.new_group([0, 1], timeout=SHORT) for _ in range(2)]
    return {
        backend: _compiled_first_use(group, backend, rank)
        for group, backend in zip(groups, ("eager", "aot_eager"), strict=True)
    }


def _compiled_first_use(group: Any, backend: str, rank: int) -> Any:
    def step(t: torch.Tensor) -> torch.Tensor:
        return comm.all_reduce_(t * 2, group=group) + 1

    compiled = torch.compile(step, backend=backend)
    outcome: list[Any] = []
    error = _error(lambda: outcome.append(compiled(torch.full((8,), float(rank + 1))).tolist()))
    return error or outcome[0]


def _bounded(call: Any, seconds: float = 30) -> Any:
    """``call()``'s result, or "hung" when it has not returned within ``seconds``."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(_error(call) or "ok"), daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else "hung"


def collectives_inside_then_callbacks(rank: int) -> dict[str, Any]:
    """torch's PowerSGD DDP hook issues collectives inside a reduction's ``then`` callback
    and waits for them there. A callback chained before the reduction ends runs where it
    ends (accel's worker thread; rank 1 here, which waits for rank 0); one chained after
    runs at once in the caller's thread (rank 0 here). A reduction issued before the
    callback was chained comes before the callback's on every rank."""
    report: dict[str, Any] = {}
    side = dist.new_group([0, 1], backend="gloo")
    for backend in ("gloo", "accel"):
        group = dist.new_group([0, 1], backend=backend, timeout=SHORT)
        dist.all_reduce(torch.ones(4), group=group)  # set up
        first, behind, nested, sent = (
            torch.full((64,), k * (rank + 1.0)) for k in (1, 10, 100, 1000)
        )

        def run(
            group: Any = group, first: Any = first, behind: Any = behind, nested: Any = nested,
            sent: Any = sent,
        ) -> None:  # fmt: skip
            issued = dist.all_reduce(first, group=group, async_op=True)
            queued = dist.all_reduce(behind, group=group, async_op=True)
            if rank == 0:
                issued.wait()  # ended before the callback is chained: it runs right here

            def inside(future: Any) -> Any:
                queued.wait()  # queued before the callback: on the worker, run there
                dist.all_reduce(nested, group=group, async_op=True).get_future().wait()
                dist.broadcast(sent, src=1, group=group)
                return future.value()

            issued.get_future().then(inside).wait()
            queued.wait()

        dist.barrier(group=side)
        if rank == 0:
            time.sleep(0.5)
        said = _bounded(run)
        report[backend] = {
            "said": said,
            "values": [t[0].item() for t in (first, behind, nested, sent)]
            if said == "ok"
            else None,
        }
    destroyed = dist.new_group([0, 1], backend="accel", timeout=SHORT)
    chained = (
        dist.all_reduce(torch.ones(4), group=destroyed, async_op=True)
        .get_future()
        .then(lambda _: dist.destroy_process_group(destroyed))
    )
    report["destroy_inside"] = _bounded(chained.wait)
    return report


def powersgd_ddp(rank: int) -> dict[str, Any]:
    """torch's own PowerSGD hook (compression from the third step) under DDP on each
    backend: the same losses (2 ranks: every sum is one addition), and no hang."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    losses: dict[str, Any] = {}
    for backend in ("gloo", "accel"):
        group = dist.new_group([0, 1], backend=backend, timeout=SHORT)
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)
        )
        ddp = DistributedDataParallel(model, process_group=group)
        state = powerSGD_hook.PowerSGDState(
            process_group=group, matrix_approximation_rank=1, start_powerSGD_iter=2
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        gen = torch.Generator().manual_seed(100 + rank)
        seen: list[float] = []

        def train(ddp: Any = ddp, gen: Any = gen, seen: list[float] = seen) -> None:
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            for _ in range(5):
                loss = ddp(torch.randn(16, 32, generator=gen)).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                seen.append(loss.item())

        said = _bounded(train, 60)
        losses[backend] = seen if said == "ok" else said
    return losses


def one_group_used_from_two_threads_at_once(rank: int) -> dict[str, Any]:
    """Two threads gather on one "accel" group at once, as they may on gloo: each
    collective's steps must not mix with the other thread's (they waited out the group's
    timeout, blaming this rank, or for ever). (The same collective in both threads: the
    ranks may pair the threads' calls either way. Different ones paired across ranks are
    a mismatch, an error naming both.)"""
    group = dist.new_group([0, 1], backend="accel", timeout=SHORT)
    outcomes: list[Any] = [None, None]
    expected = torch.arange(2, dtype=torch.float32).repeat_interleave(1000)

    def use(index: int) -> None:
        def calls() -> None:
            for _ in range(100):
                gathered = torch.empty(2000)
                dist.all_gather_into_tensor(gathered, torch.full((1000,), float(rank)), group=group)
                assert torch.equal(gathered, expected), "wrong gather"
            outcomes[index] = "ok"

        error = _error(calls)
        if error is not None:
            outcomes[index] = error

    threads = [threading.Thread(target=use, args=(index,), daemon=True) for index in (0, 1)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return {
        "outcomes": outcomes,
        "alive": [t.is_alive() for t in threads],
        "within_timeout": time.monotonic() - started < SHORT.total_seconds(),
    }


def _pipeline(rank: int, group: Any, gradient: torch.Tensor, message: torch.Tensor) -> None:
    if rank == 0:
        work = dist.all_reduce(gradient, group=group, async_op=True)
        dist.recv(message, src=1, group=group)
        work.wait()
    else:
        dist.send(message, dst=0, group=group)
        dist.all_reduce(gradient, group=group, async_op=True).wait()


def point_to_point_beside_a_queued_reduction(rank: int) -> dict[str, Any]:
    """Pipeline parallelism beside DDP: rank 0 queues an all-reduce, then receives; rank
    1 sends, then joins the all-reduce. A receive that waited for the queued reduction
    waited for a sender that waits for the receive (gloo runs them side by side)."""
    outcome: dict[str, Any] = {}
    for backend in ("gloo", "accel"):
        group = dist.new_group([0, 1], backend=backend, timeout=SHORT)
        dist.all_reduce(torch.ones(8), group=group)  # set up
        gradient, message = torch.ones(1 << 16), torch.full((1024,), float(rank))
        said = _bounded(functools.partial(_pipeline, rank, group, gradient, message))
        outcome[backend] = {"said": said, "sum": gradient[0].item(), "got": message[0].item()}
    return outcome


def a_group_of_one_rank_per_node(rank: int) -> dict[str, Any]:
    """Each rank on a node of its own: the group is gloo's, which takes a tensor's memory
    as it lies and refuses integer averages; accel's answers are the same as on one node
    (a sum divided, truncated; the logical result of a view with gaps), from the group's
    first reduction on."""
    os.environ[NODE_ENV] = f"node{rank}"
    node_identity.cache_clear()
    try:
        group = dist.new_group([0, 1], backend="accel", timeout=SHORT)
        outcome: dict[str, Any] = {}
        for call in ("first", "second"):  # the first one also sets the group up
            tensor = torch.tensor([1, 2, 3]) + 4 * rank
            average = functools.partial(dist.all_reduce, tensor, dist.ReduceOp.AVG, group)
            outcome[call] = {"said": _error(average), "value": tensor.tolist()}
        base = torch.arange(12, dtype=torch.float32) * (rank + 1)
        outcome["every_other_sum"] = _error(lambda: dist.all_reduce(base[::2], group=group))
        outcome["every_other"] = base.tolist()
        sent = torch.arange(12, dtype=torch.float32) * (rank + 1)
        outcome["every_other_broadcast"] = _error(lambda: dist.broadcast(sent[1::2], 0, group))
        outcome["broadcast"] = sent.tolist()
        return outcome
    finally:
        del os.environ[NODE_ENV]
        node_identity.cache_clear()


def main() -> None:
    store, rank, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    cases = {
        "threads_gloo": lambda: two_groups_first_used_from_two_threads(rank, "gloo"),
        "threads_accel": lambda: two_groups_first_used_from_two_threads(rank, "accel"),
        "one_group_threads": lambda: one_group_used_from_two_threads_at_once(rank),
        "async_order": lambda: async_reductions_on_two_groups_in_either_order(rank),
        "async_order_gloo": lambda: async_reductions_on_two_gloo_groups_in_either_order(rank),
        "late_pooled": lambda: late_peer_and_a_pooled_tensor(rank),
        "slow_reader": lambda: a_slow_reader_of_a_pooled_tensor(rank),
        "destroyed": lambda: a_destroyed_group_used_again(rank),
        "local_errors": lambda: local_errors_leave_the_group_usable(rank),
        "copies": lambda: copies_written_back_and_overlapping_inputs(rank),
        "outside": lambda: a_rank_outside_the_group(rank),
        "bad_pool": lambda: a_bad_pool_size_on_one_rank(rank),
        "bad_node": lambda: a_bad_node_id_on_one_rank(rank),
        "huge_pool": lambda: a_pool_size_past_the_address_space(rank),
        "compile": lambda: first_use_inside_torch_compile(rank),
        "then_callbacks": lambda: collectives_inside_then_callbacks(rank),
        "powersgd": lambda: powersgd_ddp(rank),
        "p2p": lambda: point_to_point_beside_a_queued_reduction(rank),
        "one_per_node": lambda: a_group_of_one_rank_per_node(rank),
    }
    report: dict[str, Any] = {}
    for name, case in cases.items():
        try:
            report[name] = case()
        except Exception as error:  # a case that raised where it should not: reported
            report[name] = f"raised {type(error).__name__}: {error}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
        json.dump(report, file, indent=1)
    os._exit(0)  # skip teardown of groups a case left broken


if __name__ == "__main__":
    main()
