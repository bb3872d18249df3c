"""The "accel" torch.distributed backend: every collective against gloo, DDP parity,
errors instead of hangs, nothing left in /dev/shm."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch.distributed as dist

import accel.process_group
from tests.support import ROOT
from tests.support.once import once_per_session
from tests.support.shm import left_behind, shm_names

# Every test here starts other processes (ranks, launchers, CLIs): `-m "not slow"`
# leaves them out for a quick run.
pytestmark = pytest.mark.slow


SCRIPTS = pathlib.Path(__file__).resolve().parent / "scripts"


def _torchrun(
    script: pathlib.Path, ranks: int = 2, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _run(
    tmp_path: pathlib.Path, name: str, source: str, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    """Write ``source`` (dedented) to ``tmp_path/name`` and run it on 2 ranks."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    return _torchrun(script, timeout=timeout)


def test_backend_is_registered_once() -> None:
    accel.process_group.register()
    accel.process_group.register()
    assert "ACCEL" in dist.Backend._plugins  # pyright: ignore[reportPrivateUsage]
    assert dist.Backend("accel") == "accel"


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_matches_gloo_and_ddp_and_fsdp_losses_match(ranks: int) -> None:
    # 2 ranks: identical losses; 3 (more ranks than this machine's cores, so slow, but the
    # protocol must not care): equal within the rounding of gloo's different sum order.
    shm_before = shm_names()
    result = _torchrun(SCRIPTS / "process_group_check.py", ranks)
    assert result.returncode == 0, result.stderr[-4000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["world"] == ranks
    assert facts["checked"]["all_reduce"] == 40
    assert facts["checked"]["broadcast"] == 40
    assert facts["checked"]["all_gather_into_tensor"] == 40
    assert facts["checked"]["reduce_scatter"] == 40
    assert facts["ddp_losses_match"] is True
    assert facts["fsdp_losses_match"] is True
    assert facts["functional_match"] is True  # DTensor.full_tensor(), funcol on both groups
    assert facts["shared_memory"] is True
    # Some examples were tensors in the segment's pools (hypothesis draws which): those
    # went straight between the ranks' tensors, with gloo's results.
    assert all(calls > 0 for calls in facts["pooled_calls"].values()), facts["pooled_calls"]
    assert not left_behind(shm_before)


@pytest.fixture(scope="session")
def mismatches(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What the ranks of one 2-rank job (once per session) printed when they disagreed
    on a collective (``<case> rank <r> error: ...``): each case on an "accel" group of its
    own, whose segment a first collective that agrees has set up."""
    stdout: str = once_per_session(tmp_path_factory, "mismatches", _mismatches)
    return stdout


def _mismatches(directory: pathlib.Path) -> str:
    result = _run(
        directory,
        "mismatches.py",
        """
        import sys, torch, torch.distributed as dist
        import accel.process_group
        from accel import comm
        dist.init_process_group("accel")
        rank = dist.get_rank()
        n = 4 + 2 * rank

        def failing_outside(group):  # a queued reduction that fails outside the segment
            def refuse(*args, **kwargs):
                raise RuntimeError("refused outside the communicator")
            real, comm.all_reduce_ = comm.all_reduce_, refuse
            try:
                dist.all_reduce(torch.ones(4), group=group)
            finally:
                comm.all_reduce_ = real

        cases = {
            "sizes": lambda group: dist.all_reduce(torch.ones(8 + rank), group=group),
            "crossed": lambda group: dist.barrier(group=group) if rank == 0
            else dist.broadcast(torch.ones(4), src=0, group=group),
            "scatter-sizes": lambda group: dist.reduce_scatter_single(
                torch.empty(n), torch.ones(2 * n), group=group
            ),
            "outside": failing_outside,
        }
        def say(what, call):
            try:
                call()
                said = f"{what}: no error"
            except Exception as error:
                said = f"{what} error: {error}"
            sys.stdout.write(said.splitlines()[0] + "\\n")  # one write: ranks share stdout
            sys.stdout.flush()

        for case, disagree in cases.items():
            group = dist.new_group(backend="accel")
            dist.barrier(group=group)  # sets the group's segment up
            say(f"{case} rank {rank}", lambda: disagree(group))
            # Then a reduction (queued) and a barrier (which waits for the queue).
            say(f"{case} rank {rank} then all_reduce",
                lambda: dist.all_reduce(torch.ones(4), group=group))
            say(f"{case} rank {rank} then barrier", lambda: dist.barrier(group=group))
        dist.destroy_process_group()
        print(f"rank {rank} destroyed", flush=True)
    """,
    )
    return result.stdout


def test_mismatched_sizes_are_an_error_on_every_rank(mismatches: str) -> None:
    assert "sizes rank 0 error:" in mismatches, mismatches
    assert "sizes rank 1 error:" in mismatches


def test_after_a_collective_error_the_group_says_so_and_is_destroyed_without_one(
    mismatches: str,
) -> None:
    # A later collective names the first failure and what to do, also where the shared
    # memory itself never failed ("outside": the next reduction would have run, with the
    # ranks perhaps at different collectives); destroy_process_group used to raise a failed
    # reduction's error a second time.
    outside = [line for line in mismatches.splitlines() if line.startswith("outside rank 0 error")]
    assert outside, mismatches
    assert "refused outside the communicator" in outside[0]
    for case in ("sizes", "crossed", "scatter-sizes", "outside"):
        for rank in (0, 1):
            for then in ("all_reduce", "barrier"):
                assert f"{case} rank {rank} then {then} error: " in mismatches, mismatches
    later = [line for line in mismatches.splitlines() if " then " in line]
    assert all("failed earlier" in line for line in later), later
    assert all("create a new process group" in line for line in later), later
    assert "rank 0 destroyed" in mismatches
    assert "rank 1 destroyed" in mismatches


def test_ranks_in_different_collectives_get_an_error_naming_both(mismatches: str) -> None:
    crossed = [line for line in mismatches.splitlines() if line.startswith("crossed rank")]
    assert any("collective mismatch" in line for line in crossed), mismatches
    assert any("barrier" in line and "broadcast" in line for line in crossed), crossed


def test_ranks_that_reduce_scatter_different_sizes_get_an_error_naming_both(
    mismatches: str,
) -> None:
    assert (
        "reduce_scatter mismatch: rank 0 has 4 elements of float32, rank 1 has 6" in mismatches
    ), mismatches


def test_a_killed_peer_is_an_error_not_a_hang(tmp_path: pathlib.Path) -> None:
    result = _run(
        tmp_path,
        "killed.py",
        """
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
    """,
    )
    # An exception on the surviving rank (from accel.comm or gloo, whichever notices the
    # dead peer first), well within the timeout: not a hang.
    assert "rank 0 error:" in result.stdout, result.stderr[-3000:]


def test_a_peer_dying_before_ddps_first_backward_is_an_error_not_a_crash(
    tmp_path: pathlib.Path,
) -> None:
    # The reduction fails on the group's worker thread; its error must reach backward() as
    # an exception. It used to be stored as the future's value (Future.set_exception),
    # which DDP's C++ reducer read as tensors: SIGSEGV on the surviving rank.
    result = _run(
        tmp_path,
        "ddp_dies.py",
        """
        import os, torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        layers = [torch.nn.Linear(256, 256) for _ in range(4)]
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=1)
        if dist.get_rank() == 1:
            os._exit(0)  # the peer dies after DDP's set-up, before the first backward
        try:
            model(torch.randn(8, 256)).sum().backward()
        except RuntimeError as error:
            print(f"rank 0 error: {error}", flush=True)
            os._exit(0)
        os._exit(4)
    """,
    )
    assert "rank 0 error:" in result.stdout, result.stderr[-3000:]
    assert "exited while rank 0 waited for it" in result.stdout
    assert "SIGSEGV" not in result.stderr


@pytest.mark.parametrize("backend", ["accel", "gloo"])
def test_shared_memory_waits_as_long_as_the_groups_timeout(
    tmp_path: pathlib.Path, backend: str
) -> None:
    # A rank 2.5 s late: within a 20 s group timeout every collective completes; with a 1 s
    # one, the waiting rank's error names 1 s. (accel.comm used its own fixed 10 s, which
    # took neither timeout into account.) Direct accel.comm calls follow the group too.
    result = _run(
        tmp_path,
        "late.py",
        f"""
        import datetime, time, torch, torch.distributed as dist
        import accel.process_group
        from accel import comm
        dist.init_process_group({backend!r}, timeout=datetime.timedelta(seconds=20))
        rank = dist.get_rank()
        quick = dist.new_group([0, 1], backend={backend!r}, timeout=datetime.timedelta(seconds=1))
        for group in (None, quick):
            comm.barrier(group=group)  # sets the segment up
        if rank == 0:
            time.sleep(2.5)
        t = torch.ones(4)
        comm.barrier()
        comm.all_reduce_(t)
        if {backend!r} == "accel":
            dist.barrier()
            dist.all_reduce(t)
        print(f"rank {{rank}} patient group ok {{t.tolist()}}", flush=True)
        if rank == 1:
            time.sleep(2.5)
        try:
            comm.all_reduce_(torch.ones(4), group=quick)
            print(f"rank {{rank}} quick group: no error", flush=True)
        except RuntimeError as error:
            print(f"rank {{rank}} quick group error: {{error}}", flush=True)
        dist.destroy_process_group()
    """,
    )
    total = 4.0 if backend == "accel" else 2.0
    assert f"rank 0 patient group ok {[total] * 4}" in result.stdout, result.stderr[-3000:]
    assert f"rank 1 patient group ok {[total] * 4}" in result.stdout
    assert "rank 0 quick group error: timed out after 1.0" in result.stdout, result.stdout


def test_work_wait_returns_within_its_timeout(tmp_path: pathlib.Path) -> None:
    # Work.wait(timeout=1 s) on a queued reduction ignored the timeout (it returned
    # whenever the reduction ended, 3 s later).
    result = _run(
        tmp_path,
        "wait_timeout.py",
        """
        import datetime, time, torch, torch.distributed as dist
        import accel.process_group
        dist.init_process_group("accel")
        rank = dist.get_rank()
        dist.barrier()
        if rank == 1:
            time.sleep(2.5)
        t = torch.ones(4)
        work = dist.all_reduce(t, async_op=True)
        if rank == 0:
            started = time.monotonic()
            try:
                work.wait(timeout=datetime.timedelta(seconds=1))
                print("rank 0: no timeout", flush=True)
            except RuntimeError as error:
                print(f"rank 0 timed out after {time.monotonic() - started:.3f} s: {error}", flush=True)
        work.wait()
        print(f"rank {rank} sum {t.tolist()}", flush=True)
    """,
    )
    waited = re.search(r"rank 0 timed out after ([0-9.]+) s", result.stdout)
    assert waited, result.stdout + result.stderr[-2000:]
    assert 0.9 <= float(waited[1]) < 2.4  # its own timeout, not rank 1's arrival at 2.5 s
    assert "within 0:00:01 (Work.wait's timeout)" in result.stdout
    assert "rank 0 sum [2.0, 2.0, 2.0, 2.0]" in result.stdout
    assert "rank 1 sum [2.0, 2.0, 2.0, 2.0]" in result.stdout


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


def test_premul_sum_is_refused_in_the_accel_backends_words(tmp_path: pathlib.Path) -> None:
    # Every reduction the backend hands to gloo used to fail with gloo's "Cannot use
    # ReduceOp.PREMUL_SUM with Gloo", naming a backend the caller never chose.
    import torch

    assert not dist.is_initialized()
    dist.init_process_group(
        "accel", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        premul: Any = dist._make_nccl_premul_sum(2.0)  # pyright: ignore[reportPrivateUsage]
        calls = {
            "all_reduce": lambda: dist.all_reduce(torch.ones(4), op=premul),
            "reduce": lambda: dist.reduce(torch.ones(4), 0, op=premul),
            "reduce_scatter": lambda: dist.reduce_scatter(
                torch.empty(4), [torch.ones(4)], op=premul
            ),
            "reduce_scatter_single": lambda: dist.reduce_scatter_single(
                torch.empty(4), torch.ones(4), op=premul
            ),
        }
        for call in calls.values():
            with pytest.raises(
                ValueError, match=r'PREMUL_SUM is NCCL\'s alone; the "accel" backend takes SUM'
            ):
                call()
        summed = torch.ones(4)
        dist.all_reduce(summed)  # the group is still usable
        assert summed.tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()


def test_accel_comm_called_straight_with_an_accel_group_sets_up_and_keeps_order(
    tmp_path: pathlib.Path,
) -> None:
    # accel.comm's first call on an "accel" group used to wait forever: its setup's
    # broadcast came back through the group, which asked accel.comm to set up again and
    # waited on the lock the first setup held (DeepSpeed's inference all-reduce with
    # init_process_group("accel") made exactly that call). Later direct calls must also
    # wait for the group's queued reductions, or two threads would use the segment at once.
    result = _run(
        tmp_path,
        "straight.py",
        """
        import json, torch, torch.distributed as dist
        import accel.process_group
        from accel import comm
        dist.init_process_group("accel")
        rank = dist.get_rank()
        first = comm.all_reduce_(torch.full((8,), rank + 1.0), timeout=20)
        queued = [torch.full((1 << 18,), float(rank + i)) for i in range(6)]
        works = [dist.all_reduce(t, async_op=True) for t in queued]
        direct = comm.all_reduce_(torch.full((4,), 10.0 * (rank + 1)), timeout=20)
        for work in works:
            work.wait()
        # The same from a compiled graph, which calls accel's op without the Python entry.
        compiled = torch.compile(lambda t: comm.all_reduce_(t * 1), backend="aot_eager")
        compiled(torch.ones(2))
        works = [dist.all_reduce(t, async_op=True) for t in queued]
        in_graph = compiled(torch.full((4,), 100.0 * (rank + 1)))
        for work in works:
            work.wait()
        group = dist.group.WORLD
        with open(f"OUT/rank{rank}.json", "w") as out:
            json.dump({
                "first": first.tolist(),
                "direct": direct.tolist(),
                "in_graph": in_graph.tolist(),
                "queued": [t[0].item() for t in queued] + [t[-1].item() for t in queued],
                "shared": group.shared_reductions,
                "uses_shared_memory": group.uses_shared_memory(),
            }, out)
    """.replace("OUT", str(tmp_path)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*.json"))]
    assert len(facts) == 2
    for rank_facts in facts:
        assert rank_facts["first"] == [3.0] * 8
        assert rank_facts["direct"] == [30.0] * 4
        assert rank_facts["in_graph"] == [300.0] * 4
        # Each queued tensor reduced twice: (r0 + r1) summed, then that doubled.
        assert rank_facts["queued"] == [2 * (2.0 * i + 1) for i in range(6)] * 2
        assert rank_facts["shared"] == 12
        assert rank_facts["uses_shared_memory"] is True


@pytest.fixture(scope="session")
def segment_lifetimes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Per backend of the groups, each rank's [mapped while alive, mapped after destroy]
    for three groups made and destroyed in turn (one 2-rank job per session)."""
    lifetimes: dict[str, list[Any]] = once_per_session(
        tmp_path_factory, "segment-lifetimes", _segment_lifetimes
    )
    return lifetimes


def _segment_lifetimes(directory: pathlib.Path) -> dict[str, list[Any]]:
    result = _run(
        directory,
        "lifetime.py",
        f"""
        import gc, json, torch, torch.distributed as dist
        import accel.process_group
        from accel import comm

        def mapped():
            with open("/proc/self/maps") as maps:
                return sum("accel-shm-comm" in line for line in maps)

        dist.init_process_group("gloo")
        counts = {{}}
        for backend in ("gloo", "accel"):
            for _ in range(3):
                group = dist.new_group([0, 1], backend=backend)
                comm.all_reduce_(torch.ones(4), group)
                dist.all_reduce(torch.ones(4), group=group)
                alive = mapped()
                dist.destroy_process_group(group)
                del group
                gc.collect()
                counts.setdefault(backend, []).append([alive, mapped()])
        with open(f"{directory}/rank{{dist.get_rank()}}.json", "w") as out:
            json.dump(counts, out)
    """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads(path.read_text()) for path in sorted(directory.glob("rank*.json"))]
    return {backend: [rank[backend] for rank in ranks] for backend in ("gloo", "accel")}


@pytest.mark.parametrize("backend", ["gloo", "accel"])
def test_a_destroyed_groups_segment_is_unmapped(
    segment_lifetimes: dict[str, list[Any]], backend: str
) -> None:
    # accel.comm kept every group it had seen (and its 64 MiB segment mapping) for the
    # life of the process: a job that made and destroyed groups grew by a segment each time.
    counts = segment_lifetimes[backend]
    assert counts == [[[1, 0]] * 3] * 2  # per rank: mapped while the group lives, then gone
