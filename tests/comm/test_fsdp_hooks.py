"""accel.comm.fsdp: FSDP2's buffers in the shared pools.

One rank here (a gloo group in this process): the hooks' placement and their errors. The
collectives through them, on 2 and 3 ranks against gloo, run in
tests/comm/scripts/process_group_check.py (test_process_group.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from accel.comm import fsdp, shared_empty
from accel.comm.fsdp import SharedAllGather, SharedReduceScatter, share_fsdp_buffers


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dist.ProcessGroup]:
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    world = dist.group.WORLD
    assert world is not None
    yield world
    dist.destroy_process_group()


@pytest.fixture
def placed(monkeypatch: pytest.MonkeyPatch) -> list[dist.ProcessGroup | None]:
    """The groups the hooks ask ``shared_empty`` for a buffer in (a group of one rank has
    no segment, so the pool itself is seen in the 2- and 3-rank runs)."""
    groups: list[dist.ProcessGroup | None] = []

    def spy(
        size: list[int], *, dtype: torch.dtype, group: dist.ProcessGroup | None
    ) -> torch.Tensor:
        groups.append(group)
        return shared_empty(size, dtype=dtype, group=group)

    monkeypatch.setattr(fsdp, "shared_empty", spy)
    return groups


def test_buffers_come_from_the_pool_once_the_group_is_known(
    group: dist.ProcessGroup, placed: list[dist.ProcessGroup | None]
) -> None:
    cpu = torch.device("cpu")
    for hook in (SharedAllGather(), SharedReduceScatter()):
        unknown = hook.allocate((4, 8), dtype=torch.bfloat16, device=cpu)
        assert unknown.shape == (4, 8)
        assert unknown.dtype == torch.bfloat16
    assert placed == []  # no group yet: ordinary tensors
    for hook in (SharedAllGather(group), SharedReduceScatter(group)):
        buffer = hook.allocate((1000,), dtype=torch.float32, device=cpu)
        assert buffer.shape == (1000,)
        assert buffer.is_contiguous()
        meta = hook.allocate((3,), dtype=torch.float32, device=torch.device("meta"))
        assert meta.device.type == "meta"  # another device: torch.empty there
    assert placed == [group, group]


def test_the_hooks_learn_the_group_from_the_first_call(
    group: dist.ProcessGroup, placed: list[dist.ProcessGroup | None]
) -> None:
    cpu = torch.device("cpu")
    gather = SharedAllGather()
    out, part = torch.empty(4), torch.arange(4.0)
    assert gather(out, part, group) is None
    assert torch.equal(out, part)
    gather.allocate((16,), dtype=torch.float32, device=cpu)
    scatter = SharedReduceScatter()
    scatter(out, part * 2, group, dist.ReduceOp.SUM)
    assert torch.equal(out, part * 2)
    scatter.allocate((16,), dtype=torch.float32, device=cpu)
    assert placed == [group, group]


def test_share_fsdp_buffers_sets_every_wrapped_module(group: dist.ProcessGroup) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fully_shard(model[0])
    fully_shard(model)
    assert share_fsdp_buffers(model, group) == 2
    loss = model(torch.randn(3, 4)).sum()
    loss.backward()  # one rank: FSDP2 copies instead of reduce-scattering, through allocate


def test_share_fsdp_buffers_names_what_is_wrong() -> None:
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module, got str"):
        share_fsdp_buffers("model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"module \(Linear\) has no module wrapped by fully_shard"):
        share_fsdp_buffers(torch.nn.Linear(2, 2))

    class Mesh:  # what a DeviceMesh offers (its group came at the first forward, as a TypeError)
        def get_group(self) -> None: ...

    with pytest.raises(TypeError, match=r"group must be .* got Mesh .*pass mesh\.get_group\(\)"):
        share_fsdp_buffers(torch.nn.Linear(2, 2), Mesh())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"group must be a torch.distributed ProcessGroup or None"):
        share_fsdp_buffers(torch.nn.Linear(2, 2), "x")  # type: ignore[arg-type]


def test_a_torch_without_fsdp2s_hooks_is_named_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch before FSDP2's custom-communication hooks: the module that defines them is
    # missing (None in sys.modules makes its import fail as a missing module does).
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp._fully_shard._fsdp_api", None)
    monkeypatch.delitem(sys.modules, "accel.comm.fsdp")
    with pytest.raises(
        ImportError, match=r"accel\.comm\.fsdp needs FSDP2's custom-communication"
    ) as caught:
        importlib.import_module("accel.comm.fsdp")
    assert f"torch {torch.__version__} does not have them" in str(caught.value)
    assert "AllGather / ReduceScatter classes" in str(caught.value)
