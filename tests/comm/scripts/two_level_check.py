"""One rank of a job whose nodes are simulated with ACCEL_NODE_ID; writes OUT/rank<N>.json.

    ACCEL_NODE_ID=a ... python two_level_check.py OUT BACKEND [patterns]

With ``patterns`` (BACKEND ``accel``) the job first runs every pattern of
patterns_check.py (on the same processes: one job start instead of two), and the record's
``patterns`` holds their outcomes; the counts below are of the checks that follow.

BACKEND ``gloo``: sums go through ``accel.comm.all_reduce_`` on a gloo group; ``accel``:
through ``dist.all_reduce`` on the "accel" process group. Each sum is checked against the
exact (float64) sum of every rank's values, gathered over a separate flat gloo group, and
every rank's result is gathered so the test can check they are identical. An
all-gather must deliver every rank's bytes exactly, a reduce-scatter the exact sum of
this rank's block within the summation bound, and a broadcast from every rank its bytes
exactly. DDP and FSDP2 models trained on the group under test are compared with the same
models trained on flat gloo. Calls that took the two levels are counted (the record's
``two_level``), so the test can tell them from a fallback to flat gloo. Drawn sums are
also made on tensors from ``comm.shared_empty`` (in the node's segment), which must give
the plain tensor's bits; the node segment's ``pooled_calls`` are recorded.

Sizes and dtypes: edge cases (empty, one element, not a multiple of the ranks per node, a
2-D all-gather, float32 past one 16 MiB slot) and examples drawn by hypothesis,
derandomized so that every rank draws the same ones (each example is one collective on
every rank). A failed check is recorded, not raised: a rank that stopped early would
leave the others waiting in a collective.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import accel.process_group  # noqa: F401  (registers "accel")
from accel import comm
from accel.comm import _release
from accel.comm._segment import spanning_of
from tests.support.two_level import count_two_level_calls

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EDGE_SIZES = (0, 1, 3, 1001)
LARGE = (16 << 20) // 4 + 5
# Gathers copy bytes: any dtype goes, bit for bit.
GATHER_DTYPES = (*DTYPES, torch.float64, torch.int32, torch.bool)
same_everywhere = settings(
    derandomize=True, database=None, deadline=None, max_examples=12,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip


TWO_LEVEL = count_two_level_calls()


def _values(dtype: torch.dtype, size: int, seed: int) -> torch.Tensor:
    drawn = torch.randn(size, generator=torch.Generator().manual_seed(seed))
    return drawn > 0 if dtype == torch.bool else (drawn * 100).to(dtype)


class Checks:
    """What one rank found: errors against their bounds, and bit-for-bit checks."""

    def __init__(self, backend: str, flat: dist.ProcessGroup) -> None:
        self.backend, self.flat = backend, flat
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.errors: dict[str, float] = {}
        self.bounds: dict[str, float] = {}
        self.identical = self.gathers_ok = self.pooled_same = self.ints_ok = True

    def _record(
        self, key: str, got: torch.Tensor, exact: torch.Tensor, largest: torch.Tensor
    ) -> None:
        # Each addition rounds once in the dtype at worst: world roundings of the largest
        # partial sum bound the error.
        eps = torch.finfo(got.dtype).eps
        self.errors[key] = float((got.double() - exact).abs().max()) if got.numel() else 0.0
        self.bounds[key] = float((largest * eps * self.world).max()) if got.numel() else 0.0

    def _all_reduce(self, tensor: torch.Tensor) -> None:
        if self.backend == "accel":
            dist.all_reduce(tensor)
        else:
            comm.all_reduce_(tensor)

    def sum(self, dtype: torch.dtype, size: int, pooled: bool = False) -> None:
        """All-reduce against the exact sum; every rank's result bit-identical (``pooled``:
        and the same sum of a copy in the node's segment, bit for bit)."""
        mine = torch.randn(size, generator=torch.Generator().manual_seed(self.rank * 7919 + size))
        mine = mine.to(dtype)
        everyone = [torch.empty(size, dtype=torch.float32) for _ in range(self.world)]
        dist.all_gather(everyone, mine.float(), group=self.flat)
        stacked = torch.stack(everyone).double()
        placed = comm.shared_empty(size, dtype=dtype).copy_(mine) if pooled else None
        self._all_reduce(mine)
        if placed is not None:
            self._all_reduce(placed)
            self.pooled_same &= torch.equal(placed.view(torch.uint8), mine.view(torch.uint8))
        self._record(f"{_name(dtype)}/{size}", mine, stacked.sum(0), stacked.abs().sum(0))
        results = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(results, mine, group=self.flat)
        first = results[0].view(torch.uint8)  # bytes: NaN-safe
        self.identical &= all(torch.equal(r.view(torch.uint8), first) for r in results)

    def int_sum(self, size: int) -> None:
        """An int64 all-reduce (the segment does not sum integers: gloo does, in every
        step), exactly."""
        mine = torch.arange(size, dtype=torch.int64) * (self.rank + 1)
        self._all_reduce(mine)
        total = self.world * (self.world + 1) // 2
        self.ints_ok &= torch.equal(mine, torch.arange(size, dtype=torch.int64) * total)

    def gather(self, dtype: torch.dtype, size: int, in_place: bool = False) -> None:
        """All-gather: every rank's bytes exactly (size 1001: a 2-D output, rows of 143;
        ``in_place``: this rank's tensor is its own block of the output)."""
        mine = _values(dtype, size, self.rank * 31 + size)
        expected = torch.cat([_values(dtype, size, r * 31 + size) for r in range(self.world)])
        output = torch.empty(self.world * size, dtype=dtype)
        if in_place:
            own = output[self.rank * size : (self.rank + 1) * size]
            own.copy_(mine)
            mine = own
        elif size == 1001:
            output, mine = output.view(self.world * 7, 143), mine.view(7, 143)
        if self.backend == "accel":
            dist.all_gather_into_tensor(output, mine)
        else:
            comm.all_gather_into_tensor_(output, mine)
        got = output.reshape(-1).view(torch.uint8)
        self.gathers_ok &= torch.equal(got, expected.view(torch.uint8))

    def scatter(self, dtype: torch.dtype, size: int) -> None:
        """Reduce-scatter: this rank's block against the exact sum, within the bound."""
        world, rank = self.world, self.rank
        inputs = [
            torch.randn(world * size, generator=torch.Generator().manual_seed(r * 131 + size))
            .to(dtype) for r in range(world)
        ]  # fmt: skip
        everyone = torch.stack([t.double() for t in inputs])
        output = torch.empty(size, dtype=dtype)
        if self.backend == "accel":
            dist.reduce_scatter_tensor(output, inputs[rank])
        else:
            comm.reduce_scatter_tensor_(output, inputs[rank])
        exact = everyone.sum(0).view(world, size)[rank]
        largest = everyone.abs().sum(0).view(world, size)[rank]
        self._record(f"reduce_scatter/{_name(dtype)}/{size}", output, exact, largest)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _run_checks(checks: Checks) -> None:
    for dtype in DTYPES:
        for size in (*EDGE_SIZES, LARGE) if dtype == torch.float32 else EDGE_SIZES:
            checks.sum(dtype, size)
        for size in EDGE_SIZES:
            checks.scatter(dtype, size)
    for dtype in GATHER_DTYPES:
        for size in EDGE_SIZES:
            checks.gather(dtype, size)
        checks.gather(dtype, 1003, in_place=True)
    for dtype in DTYPES:  # in the node's segment: its steps go straight between the tensors
        checks.sum(dtype, 4096, pooled=True)
    for size in (*EDGE_SIZES, 4096):
        checks.int_sum(size)

    @same_everywhere
    @given(size=st.integers(2, 300_000), dtype=st.sampled_from(DTYPES),
           gather_dtype=st.sampled_from(GATHER_DTYPES), pooled=st.booleans())  # fmt: skip
    def drawn(size: int, dtype: torch.dtype, gather_dtype: torch.dtype, pooled: bool) -> None:
        checks.sum(dtype, size, pooled)
        checks.scatter(dtype, size)
        checks.gather(gather_dtype, size)

    drawn()


def _ten_reduce_scatters(backend: str) -> tuple[int, float]:
    """How many of ten small reduce-scatters through the levels waited out the limit for
    gloo to let go of a tensor, and the seconds all ten took (FSDP makes one per layer and
    step: a fixed wait in each would multiply)."""
    world = dist.get_world_size()
    output, input = torch.empty(8), torch.ones(8 * world)
    before, start = _release.gave_up, time.perf_counter()
    for _ in range(10):
        if backend == "accel":
            dist.reduce_scatter_tensor(output, input)
        else:
            comm.reduce_scatter_tensor_(output, input)
    return _release.gave_up - before, time.perf_counter() - start


def _fsdp_losses(group: dist.ProcessGroup, rank: int) -> list[float]:
    from torch.distributed.device_mesh import DeviceMesh

    return _sharded_losses(DeviceMesh.from_group(group, "cpu"), rank)


def _hsdp_losses(rank: int, nodes: int) -> list[float]:
    """FSDP2 sharded inside each node, replicated across nodes (HSDP): the mesh's groups
    are "accel" groups of one node (shared memory) and of one rank per node (gloo)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(
        "cpu", (nodes, dist.get_world_size() // nodes), mesh_dim_names=("replicate", "shard")
    )
    return _sharded_losses(mesh, rank)


def _sharded_losses(mesh: Any, rank: int) -> list[float]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, rank)


def _ddp_losses(group: dist.ProcessGroup | None, rank: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)),
        process_group=group,
    )
    return _train(model, rank)


def _train(model: torch.nn.Module, rank: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(rank))
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def _views() -> dict[str, bool]:
    """accel.comm's collectives on views, whatever route the group takes: a strided view
    gets the logical result and the memory between its elements stays as it was; a
    tensor whose elements share memory (``expand``) is a ValueError on every rank before
    anything moves (gloo, given one, writes past its storage)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    base = torch.arange(16, dtype=torch.float32) * (rank + 1)
    strided = base[::2]
    comm.all_reduce_(strided)
    total = world * (world + 1) // 2
    outcome = {
        "strided": torch.equal(strided, torch.arange(0, 16, 2, dtype=torch.float32) * total)
        and torch.equal(base[1::2], torch.arange(1, 16, 2, dtype=torch.float32) * (rank + 1)),
    }
    calls = {
        "all_reduce_": comm.all_reduce_,
        "broadcast_": lambda t: comm.broadcast_(t, 0),
        "all_gather_into_tensor_": lambda t: comm.all_gather_into_tensor_(t, torch.ones(2)),
    }
    for name, call in calls.items():
        try:
            call(torch.ones(1).expand(2 * world))
            outcome[f"{name} refuses expand"] = False
        except ValueError:
            outcome[f"{name} refuses expand"] = True
    # A dtype gloo does not sum fails alike on every rank, and the group stays usable.
    try:
        comm.all_reduce_(torch.ones(8, dtype=torch.float8_e4m3fn))
        outcome["float8 refused"] = False
    except RuntimeError:
        outcome["float8 refused"] = True
    after = comm.all_reduce_(torch.ones(3))
    outcome["usable after float8"] = bool(after.eq(world).all())
    if dist.get_backend() == "accel":
        # An integer AVG (which gloo refuses) under inference mode, as Lightning's metrics
        # ask in its evaluation loops, whatever route the group takes.
        with torch.inference_mode():
            counters = torch.tensor([rank + 1, -(rank + 1), 7])
            dist.all_reduce(counters, op=dist.ReduceOp.AVG)
            mean = torch.tensor([total, -total, 7 * world]).div_(world, rounding_mode="trunc")
            outcome["integer average"] = torch.equal(counters, mean)
    return outcome


def main() -> None:
    out, backend, *then = Path(sys.argv[1]), sys.argv[2], *sys.argv[3:]
    patterns: dict[str, Any] | None = None
    if then == ["patterns"]:
        from patterns_check import TIMEOUT, run_patterns  # this script's directory

        dist.init_process_group(backend, timeout=TIMEOUT)
        patterns = run_patterns()  # first: it destroys the world and makes it again
        TWO_LEVEL.clear()
    else:
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    spanning = spanning_of(None)
    pooled_before = {} if spanning is None or spanning.local_shm is None else dict(
        spanning.local_shm.communicator.pooled_calls
    )  # fmt: skip
    flat = dist.new_group(backend="gloo")  # the reference: plain gloo over every rank
    checks = Checks(backend, flat)
    _run_checks(checks)
    # Broadcast from every rank, bit for bit, through the levels under test.
    broadcast_ok = True
    for src in range(world):
        for dtype in DTYPES:
            expected = torch.randn(1003, generator=torch.Generator().manual_seed(src)).to(dtype)
            mine = expected.clone() if rank == src else torch.zeros(1003, dtype=dtype)
            if backend == "accel":
                dist.broadcast(mine, src)
            else:
                comm.broadcast_(mine, src)
            broadcast_ok &= torch.equal(mine.view(torch.uint8), expected.view(torch.uint8))
    # A second group of every rank, made and destroyed twice: its levels reuse the first
    # group's sub-groups (same ranks; torch cannot make those twice).
    second_group_ok = True
    for _ in range(2):
        again = dist.new_group(backend=backend)
        total = torch.full((5,), float(rank))
        if backend == "accel":
            dist.all_reduce(total, group=again)
        else:
            comm.all_reduce_(total, group=again)
        second_group_ok &= bool(total.eq(world * (world - 1) / 2).all())
        second_group_ok &= (spanning_of(again) is None) == (spanning_of(None) is None)
        dist.destroy_process_group(again)
    spanning = spanning_of(None)
    world_group = dist.group.WORLD
    assert world_group is not None
    # DDP on a gloo world is gloo's: only the "accel" backend's is compared with flat gloo.
    ddp = _ddp_losses(None, rank) if backend == "accel" else None
    # DDP's bucket, moved into the node segment's pool (accel backend, node-local levels).
    ddp_moved = getattr(getattr(world_group, "promotions", None), "moved_buffers", None)
    record = {
        "rank": rank,
        "backend": backend,
        "levels": None if spanning is None else {"even": spanning.even, "local": spanning.local_size},
        "errors": checks.errors,
        "bounds": checks.bounds,
        "identical": checks.identical,
        "broadcast_ok": broadcast_ok,
        "gathers_ok": checks.gathers_ok,
        "pooled_same": checks.pooled_same,
        "ints_ok": checks.ints_ok,
        "node_pooled_calls": None
        if spanning is None or spanning.local_shm is None
        else {
            op: calls - pooled_before.get(op, 0)
            for op, calls in spanning.local_shm.communicator.pooled_calls.items()
        },
        "second_group_ok": second_group_ok,
        "ddp": ddp,
        "ddp_moved": ddp_moved,
        "ddp_gloo": _ddp_losses(flat, rank) if backend == "accel" else None,
        # FSDP2 calls the process group itself: only the "accel" backend routes it.
        "fsdp": _fsdp_losses(world_group, rank) if backend == "accel" else None,
        "fsdp_gloo": _fsdp_losses(flat, rank) if backend == "accel" else None,
        # HSDP where the nodes hold their ranks in order (its mesh assumes it).
        "hsdp": _hsdp_losses(rank, len(spanning.where.nodes))
        if backend == "accel" and spanning is not None and spanning.where.ranks == tuple(
            r for node in spanning.where.nodes for r in node
        ) and spanning.even else None,
        "two_level": dict(TWO_LEVEL),
        "ten_reduce_scatters": _ten_reduce_scatters(backend),
        "patterns": patterns,
    }  # fmt: skip
    record["views"] = _views()  # after "two_level" is counted: these go every route
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # The destroyed world group is still held in a reference cycle when main() returns
    # (gc.get_objects() finds it): collect it now, not at interpreter teardown, where its
    # gloo threads dropping tensors can abort the process (torch's exit race:
    # tests/integrations/deepspeed/scripts/exit_abort_repro.py).
    gc.collect()
