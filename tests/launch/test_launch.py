"""`accel run`: core plans, its command line read in this process up to torchrun, and real
two-rank jobs on this machine through torchrun (the tests marked slow)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from accel import _host
from accel.launch import cli as launch_cli
from accel.launch import worker
from accel.launch.cores import parse_core_list, split_cores
from accel.launch.worker import PLAN_ENV

TWO_NODES = {0: frozenset(range(4)), 1: frozenset(range(4, 8))}


def test_split_is_even_disjoint_and_covering() -> None:
    blocks = split_cores(list(range(10)), 3, {0: frozenset(range(10))})
    assert blocks == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_split_keeps_each_rank_inside_one_numa_node() -> None:
    blocks = split_cores(list(range(8)), 4, TWO_NODES)
    assert blocks == [[0, 1], [2, 3], [4, 5], [6, 7]]
    for block in blocks:
        assert any(set(block) <= node for node in TWO_NODES.values())
    # With cores reserved on one node (0-2 and 4-7), ranks still stay within their nodes.
    assert split_cores([0, 1, 2, 4, 5, 6, 7], 2, TWO_NODES) == [[0, 1, 2], [4, 5, 6, 7]]


def test_nodes_of_unequal_size_get_ranks_in_proportion_to_their_cores() -> None:
    # Every node got the same number of ranks: 6 and 2 cores for 4 ranks gave 3, 3, 1, 1.
    unequal = {0: frozenset(range(6)), 1: frozenset({6, 7})}
    assert split_cores(list(range(8)), 4, unequal) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    wide = {0: frozenset(range(52)), 1: frozenset(range(56, 60))}
    blocks = split_cores([*range(52), *range(56, 60)], 4, wide)
    assert [len(block) for block in blocks] == [13, 13, 13, 13]  # the small node left idle
    assert split_cores(list(range(8)), 1, unequal) == [list(range(8))]  # fewer ranks: all


def test_no_ranks_is_an_error() -> None:
    with pytest.raises(ValueError, match="--nproc-per-node must be >= 1, got 0"):
        split_cores([0, 1], 0, TWO_NODES)


def test_too_few_cores_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"cannot bind 3 ranks to 2 cores \(0-1\)"):
        split_cores([0, 1], 3, TWO_NODES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-3,6", r": cores 6 are not available to this process \(allowed: 0-5,7\)"),
        ("0-2,2", " must not repeat an id; 2 repeat in '0-2,2'"),
        ("3-1", ": range '3-1' in '3-1' ends before it starts"),
        ("0-x", " must be comma-separated ids and ranges"),
        ("1_0", " must be comma-separated ids and ranges"),
        ("\u00b2", " must be comma-separated ids and ranges"),
        ("0-9", ": '0-9' in '0-9' goes past 7, the highest id allowed here"),
        ("", " must name at least one core"),
    ],
)
def test_bad_core_lists_name_the_option(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--bind-core-list{message}"):
        parse_core_list(text, allowed={0, 1, 2, 3, 4, 5, 7})


def test_core_list_parsing_is_linear() -> None:
    # 0-40000 took 21 s when repeats were found with list.count (quadratic); a range past
    # the allowed cores must fail before it is expanded, whatever its size.
    allowed = set(range(200_001))
    started = time.perf_counter()
    assert len(parse_core_list("0-200000", allowed)) == 200_001
    with pytest.raises(ValueError, match="goes past 200000"):
        parse_core_list("0-100000000000000", allowed)
    assert time.perf_counter() - started < 5


REPORT = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from accel import get_accelerator

    dist.init_process_group(get_accelerator().communication_backend_name())
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    report = {"cores": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS"),
              "sum": total.item(), "world": dist.get_world_size()}
    with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as out:
        json.dump(report, out)
    dist.destroy_process_group()
    """
)


def _accel_run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    # These tests are about CPU ranks: the same on a GPU machine.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"ACCEL_BACKEND": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "accel", "run", "--standalone", *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip


def _reports(directory: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("rank*.json"))]


@pytest.mark.slow  # starts `accel run` and its ranks
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_two_bound_ranks_get_disjoint_cores_and_all_reduce(tmp_path: Path) -> None:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    result = _accel_run("--nproc-per-node", "2", "--bind-cores-to-rank", str(script), str(tmp_path))
    assert result.returncode == 0, result.stderr
    reports = _reports(tmp_path)
    assert len(reports) == 2
    cores = [set(r["cores"]) for r in reports]  # type: ignore[arg-type]
    assert not cores[0] & cores[1]
    assert cores[0] | cores[1] == set(os.sched_getaffinity(0))
    for report, own in zip(reports, cores, strict=True):
        assert report["omp"] == str(len(own))
        assert report["sum"] == 3.0
        assert report["world"] == 2


@pytest.mark.slow  # starts `accel run` and its ranks
def test_bind_core_list_restricts_the_cores(tmp_path: Path) -> None:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    last = max(os.sched_getaffinity(0))
    result = _accel_run(
        "--nproc-per-node", "1", "--bind-core-list", str(last), str(script), str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert _reports(tmp_path)[0]["cores"] == [last]


@pytest.mark.slow  # starts `accel run` and its ranks
def test_nproc_defaults_to_the_backends_device_count(tmp_path: Path) -> None:
    from accel.backends.cpu import CPUAccelerator

    script = tmp_path / "report.py"
    script.write_text(REPORT)
    result = _accel_run(str(script), str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert len(_reports(tmp_path)) == CPUAccelerator().device_count()


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch, fresh_selection: None, tmp_path: Path) -> list[Any]:
    """``accel run`` in this process up to torchrun, whose ``run`` only records the
    arguments it was handed: what the command line asks for, without starting ranks.
    The environment ``accel run`` sets for its ranks stays in a copy; the current
    directory is a new one holding ``world.py``."""
    import torch.distributed.run as torchrun

    monkeypatch.setenv("ACCEL_BACKEND", "cpu")  # CPU ranks, also on a GPU machine
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "world.py").write_text("")
    handed: list[Any] = []
    monkeypatch.setattr(torchrun, "run", handed.append)
    return handed


@pytest.mark.parametrize(
    "spelling",
    [
        ["--nproc_per_node=2"],
        ["--nproc_per_node", "2"],
        ["--nproc-per", "2"],
        ["--nproc-per-node=2"],
    ],
    ids=["underscore=", "underscore", "abbreviated", "dash="],
)
def test_every_spelling_torchrun_accepts_sets_the_rank_count(
    launched: list[Any], spelling: list[str]
) -> None:
    # Only the exact dash spelling used to count: the others silently ran one rank.
    assert launch_cli.main(["--standalone", *spelling, "world.py"]) == 0
    [args] = launched
    assert args.nproc_per_node == "2"
    assert len(json.loads(os.environ[PLAN_ENV])["ranks"]) == 2  # what each rank is given
    assert args.training_script_args[-1] == "world.py"  # the user's program, run by the worker


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "must be at least 1, got 0"), ("x", "'x'"), ("-1", "must be at least 1, got -1"),
     (" 0", "must be at least 1, got 0")],
)  # fmt: skip
def test_a_bad_rank_count_is_a_usage_error_naming_it(
    launched: list[Any], capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        launch_cli.main(["--standalone", "--nproc-per-node", value, "x.py"])
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert "accel run: error: --nproc-per-node" in stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert launched == []


@pytest.mark.parametrize(
    "script_arguments",
    [["--bind", "0.0.0.0:8000"], ["--bind=0.0.0.0:8000"], ["--bind-core", "3"], ["--b", "1"],
     ["--nproc-per-node", "5"], ["--lr", "--", "--bind"]],
)  # fmt: skip
def test_the_scripts_arguments_reach_it_unchanged(
    launched: list[Any], script_arguments: list[str]
) -> None:
    # argparse read "--bind" after the script as an abbreviation of accel's --bind-* options:
    # "ambiguous option: --bind could match --bind-cores-to-rank, --bind-core-list".
    launch_cli.main(["--standalone", "--nproc-per-node=1", "world.py", *script_arguments])
    assert launched[0].training_script_args[-1 - len(script_arguments) :] == [
        "world.py", *script_arguments
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "script", "tee"),
    [(["world.py", "--", "--lr", "1"], ["world.py", "--lr", "1"], "0"),
     (["world.py", "--"], ["world.py"], "0"),
     (["-mt", "3", "world", "--bind"], ["world", "--bind"], "3"),
     (["-mt3", "world"], ["world"], "3")],
)  # fmt: skip
def test_the_command_line_means_what_it_means_to_torchrun(
    launched: list[Any], command: list[str], script: list[str], tee: str
) -> None:
    # argparse drops a "--" right after the script; -mt 3 is -m, then -t 3.
    launch_cli.main(["--standalone", "--nproc-per-node=1", *command])
    args = launched[0]
    assert args.training_script_args[-len(script) :] == script
    assert args.tee == tee


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--nproc-per-node", "99999999999"], "--nproc-per-node must be at most 65536"),
     (["--bogus"], "unrecognized arguments: --bogus"),
     (["--monitor-interval", "inf"], "--monitor-interval must be more than 0 and at most 86400"),
     (["--bind-cores-to-rank", "--nproc-per-node", "9999"], "--bind-cores-to-rank (the cores of")],
)  # fmt: skip
def test_a_value_that_would_fail_later_is_a_one_line_usage_error(
    launched: list[Any], capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    # A MemoryError planning 10**11 ranks, an OverflowError in the agent's clock, and a
    # core shortage that named no source; argparse's own errors printed the whole usage.
    with pytest.raises(SystemExit) as exited:
        launch_cli.main(["--standalone", *arguments, "world.py"])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("accel run: error: ")
    assert message in lines[0]
    assert launched == []


def test_a_launch_without_a_plan_drops_the_one_it_inherited(launched: list[Any]) -> None:
    # Started from a rank of an outer `accel run --bind-cores-to-rank`, an inner launch with
    # --virtual-local-rank left the outer plan in place: its ranks took rank 0's cores.
    os.environ[PLAN_ENV] = json.dumps({"ranks": [{"cores": [0], "env": {}}]})
    launch_cli.main(["--standalone", "--nproc-per-node=1", "--virtual-local-rank", "world.py"])
    assert PLAN_ENV not in os.environ


def test_a_plan_that_is_not_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLAN_ENV, "{not json")
    with pytest.raises(SystemExit, match=f"{PLAN_ENV} is not the plan accel run writes"):
        worker.main(["world.py"])


def test_a_path_through_a_link_and_up_runs_what_python_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "link/../x.py" was normalised to "x.py" beside the link; the kernel (and Python) go
    # up from the link's target.
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "x.py").write_text("import builtins; builtins.ran = 'real'\n")
    (tmp_path / "x.py").write_text("import builtins; builtins.ran = 'beside the link'\n")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PLAN_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    worker.main(["link/../x.py"])
    import builtins

    assert builtins.ran == "real"  # type: ignore[attr-defined]
    del builtins.ran  # type: ignore[attr-defined]


def test_bad_core_list_fails_before_starting_ranks(
    launched: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        launch_cli.main(
            ["--standalone", "--nproc-per-node", "2", "--bind-core-list", "0-9999", "x.py"]
        )
    assert exited.value.code == 2  # a usage error, reported as argparse reports its own
    assert "accel run: error: --bind-core-list: '0-9999' in '0-9999' goes past" in (
        capsys.readouterr().err
    )
    assert launched == []


@pytest.mark.slow  # starts `accel run` and its ranks
def test_a_failing_rank_stops_the_job_and_leaves_no_process(tmp_path: Path) -> None:
    marker = f"accel-orphan-check-{os.getpid()}"
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent(
        f"""
        import os, sys, time
        MARKER = "{marker}"
        if os.environ["LOCAL_RANK"] == "1":
            time.sleep(1)
            sys.exit(1)
        time.sleep(120)  # rank 0 would outlive the job if nobody stopped it
        """
    ))  # fmt: skip
    started = time.monotonic()
    result = _accel_run("--nproc-per-node", "2", str(script), marker, timeout=100)
    assert result.returncode != 0
    assert time.monotonic() - started < 90
    assert "fail.py" in result.stderr
    time.sleep(1)
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []


@pytest.mark.slow  # starts `accel run` and its ranks
def test_non_python_programs_keep_their_binding(tmp_path: Path) -> None:
    out = tmp_path / "affinity"
    result = _accel_run(
        "--nproc-per-node", "1", "--bind-cores-to-rank", "--no-python",
        "sh", "-c", f"grep Cpus_allowed_list /proc/self/status > {out}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Cpus_allowed_list" in out.read_text()


_TWO = ["--nproc-per-node", "2"]


@pytest.mark.parametrize(
    ("arguments", "environment", "message"),
    [
        ([*_TWO, "nope.py"], {}, "can't open file '.*nope.py': no such file"),
        ([*_TWO, "."], {}, "can't find '__main__' module in"),
        ([*_TWO, "--no-python", "no_such_program"], {}, "'no_such_program' is not an executable"),
        ([*_TWO, "--no-python", "-m", "pkg.mod"], {}, "--no-python and --module"),
        (
            [*_TWO, "--virtual-local-rank", "--bind-cores-to-rank", "world.py"], {},
            "every rank's LOCAL_RANK is 0",
        ),
        ([*_TWO, "world.py"], {"ACCEL_BACKEND": "bogus"}, "ACCEL_BACKEND='bogus'"),
        (["world.py"], {"LOCAL_SIZE": "abc"}, "LOCAL_SIZE"),  # the default rank count
        ([*_TWO, "world.py"], {"LOCAL_SIZE": "abc"}, "LOCAL_SIZE"),  # the ranks read it too
        ([*_TWO, "--nnodes", "0", "world.py"], {}, "--nnodes must be at least 1"),
        ([*_TWO, "--nnodes", "abc", "world.py"], {}, "--nnodes must be a number of nodes"),
        ([*_TWO, "--nnodes", "2:1", "world.py"], {}, "MIN <= MAX"),
        ([*_TWO, "--max-restarts", "-1", "world.py"], {}, "--max-restarts must be 0 or more"),
        ([*_TWO, "--monitor-interval", "-1", "world.py"], {}, "--monitor-interval must be more"),
        ([*_TWO, "world.py"], {"PET_BIND_CORES_TO_RANK": "yes"}, "PET_BIND_CORES_TO_RANK must be"),
        (
            [*_TWO, "world.py"], {"PET_BIND_CORE_LIST": "0-99999"},
            "environment variable PET_BIND_CORE_LIST: '0-99999'",
        ),
        ([*_TWO, "--bind-core-list", "0-99999", "world.py"], {}, "--bind-core-list: '0-99999'"),
    ],
)  # fmt: skip
def test_what_every_rank_would_fail_on_is_one_line_before_any_starts(
    launched: list[Any],
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    environment: dict[str, str],
    message: str,
) -> None:
    # Each was a traceback per rank (or a bare AssertionError, or a silent exec attempt).
    os.environ.update(environment)
    try:
        status = launch_cli.main(["--standalone", *arguments])
    except SystemExit as exited:
        status = exited.code
    assert status == 2
    stderr = capsys.readouterr().err
    assert re.search(f"accel run: error: .*{message}", stderr), stderr
    assert "Traceback" not in stderr
    assert launched == []


@pytest.mark.slow  # starts `accel run` and its rank
def test_a_rank_starts_as_torchruns_python_would_start_it(tmp_path: Path) -> None:
    # The worker ran with -m, which put the current directory first on sys.path: a json.py
    # there broke every rank before the user's code, and sibling modules were importable
    # where torchrun's `python script.py` finds none.
    (tmp_path / "json.py").write_text("raise SystemExit('the current directory shadowed json')\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "show.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'file': __file__, 'path0': sys.path[0], 'cwd': os.getcwd()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"ACCEL_BACKEND": "cpu"}
    command = Path(sys.executable).with_name("accel")  # the console script users run
    result = subprocess.run(
        [str(command), "run", "--standalone", "--nproc-per-node", "1", "sub/show.py"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    shown = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert shown["file"] == str(tmp_path / "sub" / "show.py")  # absolute, as python's
    assert shown["path0"] == str(tmp_path / "sub")
    # A link's directory is its target's (Python resolves it); a directory runs its
    # __main__.py with itself first on sys.path.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "link.py").symlink_to(tmp_path / "sub" / "show.py")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text((tmp_path / "sub" / "show.py").read_text())
    for script, path0 in (("other/link.py", tmp_path / "sub"), ("app", tmp_path / "app")):
        result = subprocess.run(
            [str(command), "run", "--standalone", "--nproc-per-node", "1", script],
            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        lines = result.stdout.splitlines()
        assert json.loads(next(line for line in lines if line.startswith("{")))["path0"] == str(
            path0
        )


class _FakeGPUs:
    """A backend with one visibility variable and four devices (no GPU needed)."""

    def visible_devices_envs(self) -> list[str]:
        return ["CUDA_VISIBLE_DEVICES"]

    def set_visible_devices_envs(self, env: dict[str, str], ids: list[int]) -> None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))


def test_devices_the_launcher_was_given_are_the_ones_its_ranks_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CUDA_VISIBLE_DEVICES=2,3 for the launcher: its ranks got 0 and 1, other jobs' GPUs.
    backend: Any = _FakeGPUs()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    plan = launch_cli.make_plan(backend, 2, bind=False, core_list=None)
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in plan["ranks"]] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-5f2c")
    plan = launch_cli.make_plan(backend, 2, bind=False, core_list=None)
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in plan["ranks"]] == ["GPU-aa", "GPU-5f2c"]
    with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES='GPU-aa, GPU-5f2c' in accel run's"):
        launch_cli.make_plan(backend, 3, bind=False, core_list=None)
    # CUDA's rules: an invalid entry ends the list, a repeated one hides every device.
    for inherited, visible in (("0,-1,1", 1), ("2,2", 0), ("", 0), ("3,", 1)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inherited)
        with pytest.raises(ValueError, match=f"makes {visible} visible"):
            launch_cli.make_plan(backend, visible + 1, bind=False, core_list=None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    plan = launch_cli.make_plan(backend, 2, bind=False, core_list=None)
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in plan["ranks"]] == ["0", "1"]


def test_bound_cpu_ranks_stay_on_the_numa_nodes_the_backend_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ACCEL_VISIBLE_NUMA_NODES=1: a rank was pinned to node 0's cores and told node 1.
    class TwoNodes:
        def visible_devices_envs(self) -> list[str]:
            return ["ACCEL_VISIBLE_NUMA_NODES"]

        def set_visible_devices_envs(self, env: dict[str, str], ids: list[int]) -> None:
            env["ACCEL_VISIBLE_NUMA_NODES"] = ",".join(map(str, ids))

        def numa_nodes(self) -> list[int]:
            return [1]

    monkeypatch.setattr(_host, "allowed_cpus", lambda: set(range(8)))
    monkeypatch.setattr(
        _host, "numa_topology", lambda: {0: frozenset(range(4)), 1: frozenset(range(4, 8))}
    )
    backend: Any = TwoNodes()
    plan = launch_cli.make_plan(backend, 2, bind=True, core_list=None)
    assert [r["cores"] for r in plan["ranks"]] == [[4, 5], [6, 7]]
    assert [r["env"]["ACCEL_VISIBLE_NUMA_NODES"] for r in plan["ranks"]] == ["1", "1"]
    with pytest.raises(ValueError, match=r"cores \[2, 3\] are not on the NUMA nodes the backend"):
        launch_cli.make_plan(backend, 1, bind=True, core_list="2-5")


def test_binding_takes_its_defaults_from_pet_variables_as_torchruns_options_do(
    launched: list[Any],
) -> None:
    # PET_BIND_CORES_TO_RANK and PET_BIND_CORE_LIST were silently ignored.
    allowed = sorted(os.sched_getaffinity(0))
    os.environ["PET_BIND_CORE_LIST"] = str(allowed[0])
    assert launch_cli.main(["--standalone", "--nproc-per-node", "1", "world.py"]) == 0
    assert json.loads(os.environ[PLAN_ENV])["ranks"][0]["cores"] == [allowed[0]]
