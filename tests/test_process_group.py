"""The "accel" torch.distributed backend: every collective against gloo, DDP parity,
errors instead of hangs, nothing left in /dev/shm."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist

import accel.process_group

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _torchrun(
    script: pathlib.Path, ranks: int = 2, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_backend_is_registered_once() -> None:
    accel.process_group.register()
    accel.process_group.register()
    assert "ACCEL" in dist.Backend._plugins  # pyright: ignore[reportPrivateUsage]
    assert dist.Backend("accel") == "accel"


def test_every_collective_matches_gloo_and_ddp_and_fsdp_losses_are_identical() -> None:
    shm_before = set(os.listdir("/dev/shm"))
    result = _torchrun(ROOT / "tests" / "dist_scripts" / "process_group_check.py")
    assert result.returncode == 0, result.stderr[-4000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["checked"]["all_reduce"] == 40
    assert facts["checked"]["broadcast"] == 40
    assert facts["checked"]["all_gather_into_tensor"] == 40
    assert facts["checked"]["reduce_scatter"] > 0
    assert facts["ddp_losses_equal"] is True
    assert facts["fsdp_losses_equal"] is True
    assert facts["shared_memory"] is True
    assert set(os.listdir("/dev/shm")) <= shm_before


def test_mismatched_sizes_are_an_error_on_every_rank(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "mismatch.py"
    script.write_text(
        textwrap.dedent("""
        import torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        rank = dist.get_rank()
        dist.all_reduce(torch.ones(8))  # sets the segment up
        try:
            dist.all_reduce(torch.ones(8 + rank))
            dist.barrier()
        except Exception as error:
            print(f"rank {rank} error: {error}", flush=True)
            raise SystemExit(3)
    """)
    )
    result = _torchrun(script, timeout=120)
    assert result.returncode != 0
    assert "error:" in result.stdout


def test_a_killed_peer_is_an_error_not_a_hang(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(
        textwrap.dedent("""
        import os, torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        rank = dist.get_rank()
        dist.all_reduce(torch.ones(8))
        if rank == 1:
            os._exit(0)  # dies without a word
        try:
            work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
            work.wait()
        except Exception as error:
            print(f"rank 0 error: {error}", flush=True)
            os._exit(0)
        os._exit(4)
    """)
    )
    result = _torchrun(script, timeout=120)
    # An exception on the surviving rank (from accel.comm or gloo, whichever notices the
    # dead peer first), well within the timeout: not a hang.
    assert "rank 0 error:" in result.stdout, result.stderr[-3000:]


def test_ranks_in_different_collectives_get_an_error_naming_both(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "crossed.py"
    script.write_text(
        textwrap.dedent("""
        import torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        rank = dist.get_rank()
        dist.barrier()  # sets the segment up
        try:
            if rank == 0:
                dist.barrier()
            else:
                dist.broadcast(torch.ones(4), src=0)
        except Exception as error:
            print(f"rank {rank} error: {error}", flush=True)
    """)
    )
    result = _torchrun(script, timeout=120)
    assert "collective mismatch" in result.stdout, result.stderr[-3000:]
    assert "barrier" in result.stdout
    assert "broadcast" in result.stdout


def test_bad_arguments_to_the_node_local_collectives_name_the_problem(
    tmp_path: pathlib.Path,
) -> None:
    import torch

    from accel import comm

    with pytest.raises(TypeError, match=r"output must be a torch\.Tensor, got list"):
        comm.all_gather_into_tensor_([1], torch.ones(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0, got 0"):
        comm.broadcast_(torch.ones(1), 0, timeout=0)
    if not dist.is_initialized():
        with pytest.raises(
            RuntimeError, match=r"barrier\(\) needs torch.distributed.init_process_group"
        ):
            comm.barrier()
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        with pytest.raises(
            ValueError,
            match=r"output must hold world size \(1\) x tensor's 3 elements of torch.float32, got 4 of torch.float32",
        ):
            comm.all_gather_into_tensor_(torch.empty(4), torch.ones(3))
        with pytest.raises(TypeError, match="src must be a global rank"):
            comm.broadcast_(torch.ones(1), "0")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="src 5 is not a rank of the group"):
            comm.broadcast_(torch.ones(1), 5)
        out = torch.empty(3)
        assert torch.equal(comm.all_gather_into_tensor_(out, torch.arange(3.0)), torch.arange(3.0))
        with pytest.raises(TypeError, match=r"input must be a torch\.Tensor, got list"):
            comm.reduce_scatter_tensor_(torch.empty(1), [1.0])  # type: ignore[arg-type]
        with pytest.raises(
            ValueError,
            match=r"input must hold world size \(1\) x output's 3 elements of torch.float32, got 3 of torch.bfloat16",
        ):
            comm.reduce_scatter_tensor_(torch.empty(3), torch.ones(3, dtype=torch.bfloat16))
        assert torch.equal(
            comm.reduce_scatter_tensor_(out, torch.arange(3.0) * 2), torch.arange(3.0) * 2
        )
        comm.barrier()  # one rank: nothing to wait for
    finally:
        dist.destroy_process_group()


def test_ranks_that_reduce_scatter_different_sizes_get_an_error_naming_both(
    tmp_path: pathlib.Path,
) -> None:
    script = tmp_path / "sizes.py"
    script.write_text(
        textwrap.dedent("""
        import torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        rank = dist.get_rank()
        dist.barrier()  # sets the segment up
        n = 4 + 2 * rank
        try:
            dist.reduce_scatter_single(torch.empty(n), torch.ones(2 * n))
        except Exception as error:
            print(f"rank {rank} error: {error}", flush=True)
    """)
    )
    result = _torchrun(script, timeout=120)
    assert "reduce_scatter mismatch: rank 0 has 4 elements of float32, rank 1 has 6" in (
        result.stdout
    ), result.stderr[-3000:]
