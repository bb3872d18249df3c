"""Activating accel in DeepSpeed (_install.py, _support.py, status.py, and the start-up hook's
DeepSpeed watch in _accel_startup), each case in fresh processes: the three ways to activate
it, both import orders, the start-up hook's cost and errors, and the report's DeepSpeed
section."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("deepspeed")

from tests.integrations.deepspeed.processes import (
    ACCEL_BUILDERS,
    ROOT,
    assert_no_jit,
    fresh_env,
    last_json,
    last_json_list,
    run_python,
)

# Every test here starts other processes (ranks, launchers, CLIs): `-m "not slow"`
# leaves them out for a quick run.
pytestmark = pytest.mark.slow


PROBE = """
    import json, sys
    torch_at_start = "torch" in sys.modules
    {before}
    import deepspeed
    {after}
    from deepspeed.accelerator import get_accelerator
    import deepspeed.ops.adam.cpu_adam as cpu_adam, deepspeed.ops.lion.fused_lion as fused_lion
    import deepspeed.ops.op_builder as op_builder, deepspeed.runtime.utils as runtime_utils
    from accel.integrations import deepspeed as accel_ds
    print(json.dumps({{
        "torch_at_start": torch_at_start,
        "accelerator": type(get_accelerator()).__name__,
        "active": accel_ds.is_active(),
        "bound": sorted({{cls.__module__ for cls in (cpu_adam.CPUAdamBuilder,
            fused_lion.FusedLionBuilder, op_builder.FusedAdamBuilder, op_builder.ShareMemCommBuilder)}}),
        "captured": type(runtime_utils.torch_memory_reserved.__self__).__name__,
        "compatible": deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"],
        "zero_pooled": getattr(sys.modules["deepspeed.runtime.zero.stage_1_and_2"]
                               .DeepSpeedZeroOptimizer.allreduce_bucket, "accel_pooled", False),
    }}))
"""


@pytest.mark.parametrize(
    ("env_value", "before", "after"),
    [
        pytest.param("1", "", "", id="env-var"),
        pytest.param(None, "from accel.integrations import deepspeed as d; d.install()", "", id="install-before"),
        pytest.param(None, "", "import deepspeed.ops; deepspeed.ops.__compatible_ops__; "
                     "from accel.integrations import deepspeed as d; d.install(); d.install()", id="install-after"),
    ],
)  # fmt: skip
def test_every_activation_ends_with_accel_everywhere(
    tmp_path: pathlib.Path, env_value: str | None, before: str, after: str
) -> None:
    env = (
        fresh_env(tmp_path) if env_value is None else fresh_env(tmp_path, ACCEL_DEEPSPEED=env_value)
    )
    facts = last_json(run_python(PROBE.format(before=before, after=after), env))
    assert facts == {
        "torch_at_start": False,  # the startup hook never imports torch by itself
        "accelerator": "AccelDeepSpeedAccelerator",
        "active": True,
        "bound": ACCEL_BUILDERS,
        "captured": "AccelDeepSpeedAccelerator",
        "compatible": True,
        "zero_pooled": True,  # ZeRO-1/2's flat buckets go to the pool (zero.py)
    }
    assert_no_jit(tmp_path)


def test_env_var_reaches_spawned_workers(tmp_path: pathlib.Path) -> None:
    code = """
        import json, multiprocessing as mp

        def child(queue):
            import deepspeed
            from deepspeed.accelerator import get_accelerator
            queue.put(type(get_accelerator()).__name__)

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            worker = ctx.Process(target=child, args=(queue,))
            worker.start()
            print(json.dumps({"child": queue.get(timeout=120)}))
            worker.join()
    """
    script = tmp_path / "spawn_child.py"
    script.write_text(textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, str(script)], env=fresh_env(tmp_path, ACCEL_DEEPSPEED="1"),
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert last_json(result) == {"child": "AccelDeepSpeedAccelerator"}


def test_without_the_variable_deepspeed_is_untouched(tmp_path: pathlib.Path) -> None:
    code = """
        import json, sys
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        print(json.dumps({"accelerator": type(get_accelerator()).__name__,
                          "accel_imported": "accel" in sys.modules}))
    """
    facts = last_json(run_python(code, fresh_env(tmp_path, ACCEL_DEEPSPEED="0")))
    assert facts == {"accelerator": "CPU_Accelerator", "accel_imported": False}


def test_bad_variable_value_is_an_error_naming_it(tmp_path: pathlib.Path) -> None:
    result = run_python("import deepspeed", fresh_env(tmp_path, ACCEL_DEEPSPEED="yes"))
    assert result.returncode != 0
    message = "environment variable ACCEL_DEEPSPEED must be 0 or 1, got 'yes'"
    assert message in result.stderr  # said once at start-up, raised on import
    assert f"ValueError: {message}" in result.stderr
    quiet = run_python("print('no deepspeed here')", fresh_env(tmp_path, ACCEL_DEEPSPEED="yes"))
    assert quiet.returncode == 0
    assert quiet.stderr.count(message) == 1


def test_a_bad_zero_pool_switch_stops_the_activation_naming_it(tmp_path: pathlib.Path) -> None:
    code = """
        import json
        try:
            import deepspeed
        except ValueError as error:
            from accel.integrations import deepspeed as accel_ds
            print(json.dumps({"error": str(error), "active": accel_ds.is_active()}))
    """
    env = fresh_env(tmp_path, ACCEL_DEEPSPEED="1", ACCEL_ZERO_POOL="on")
    assert last_json(run_python(code, env)) == {
        "error": "environment variable ACCEL_ZERO_POOL must be 0 or 1, got 'on'",
        "active": False,
    }


def test_startup_hook_imports_nothing_with_or_without_the_variable(tmp_path: pathlib.Path) -> None:
    # Armed, it waits for DeepSpeed's accelerator module: accel comes with deepspeed.
    code = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith(('accel', 'torch', 'deepspeed')))))"
    assert last_json_list(run_python(code, fresh_env(tmp_path))) == []
    assert last_json_list(run_python(code, fresh_env(tmp_path, ACCEL_DEEPSPEED="1"))) == []
    armed = "from accel.integrations import deepspeed as d; print(d.is_armed(), d.is_active())"
    assert run_python(armed, fresh_env(tmp_path, ACCEL_DEEPSPEED="1")).stdout == "True False\n"
    assert run_python(armed, fresh_env(tmp_path)).stdout == "False False\n"


@pytest.mark.parametrize("version", ["0.18.9", "0.20.0", "1.0"])
def test_unsupported_version_names_the_supported_range(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    from accel.integrations.deepspeed import _install

    monkeypatch.setattr(_install, "installed_version", lambda: version)
    with pytest.raises(
        RuntimeError, match=rf"deepspeed {version} is not supported.*>=0\.19\.0,<0\.20"
    ):
        _install.install()
    monkeypatch.setattr(_install, "installed_version", lambda: None)
    with pytest.raises(ImportError, match="needs deepspeed"):
        _install.install()


def test_ds_accelerator_that_disagrees_with_accel_is_an_error(tmp_path: pathlib.Path) -> None:
    result = run_python(
        "import deepspeed", fresh_env(tmp_path, ACCEL_DEEPSPEED="1", DS_ACCELERATOR="cuda")
    )
    assert result.returncode != 0
    assert "DS_ACCELERATOR='cuda'" in result.stderr
    assert "accel selected 'cpu'" in result.stderr


def test_accel_run_deepspeed_activates_it_in_the_ranks(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(
        "import json, os, deepspeed\n"
        "from deepspeed.accelerator import get_accelerator\n"
        "print(json.dumps({'rank': os.environ['RANK'], "
        "'accelerator': type(get_accelerator()).__name__}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "accel", "run", "--nproc-per-node=1", "--standalone",
         "--deepspeed", str(script)],
        env=fresh_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert last_json(result) == {"rank": "0", "accelerator": "AccelDeepSpeedAccelerator"}


def test_report_has_a_deepspeed_section(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accel", "report", "--json"], env=fresh_env(tmp_path, ACCEL_DEEPSPEED="1"),
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    section = json.loads(result.stdout)["deepspeed"]
    assert section["supported"] is True
    assert section["env"] == "1"
    assert section["version"].startswith("0.19.")
    assert "FusedLionBuilder" in section["accel_builders"]


def test_a_broken_accel_is_said_once_without_a_traceback(tmp_path: pathlib.Path) -> None:
    # With ACCEL_DEEPSPEED=1 and an accel that fails to import, site.py printed the .pth
    # line's traceback twice per process, and DeepSpeed then ran natively without a word.
    # Now a process that never imports deepspeed says nothing, and one that does is told
    # once, at its import, naming the cause; DeepSpeed runs natively there.
    broken = tmp_path / "broken" / "accel"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-installed')\n")
    env = fresh_env(tmp_path, ACCEL_DEEPSPEED="1", PYTHONPATH=str(broken.parent))
    quiet = subprocess.run(
        [sys.executable, "-c", "print('ran')"], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "ran\n", "")
    code = (
        "import deepspeed, deepspeed.env_report, deepspeed.comm.torch\n"
        "from deepspeed.accelerator import get_accelerator\n"
        "print(type(get_accelerator()).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "CPU_Accelerator"
    # At the line that imported DeepSpeed's accelerator module (DeepSpeed's own).
    said = [
        line.partition(" RuntimeWarning: ")[2]
        for line in result.stderr.splitlines()
        if "accel:" in line
    ]
    assert said == [
        "accel: ACCEL_DEEPSPEED is set, but DeepSpeed runs without accel in this process: "
        "importing accel.integrations.deepspeed._install failed (ImportError: half-installed)"
    ], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("report_first", [False, True])
def test_ds_report_says_accels_prebuilt_ops_are_installed(
    tmp_path: pathlib.Path, report_first: bool
) -> None:
    # ds_report said "installed: NO" for every op accel ships compiled. Its table now says
    # YES for those; DeepSpeed's own record, which its builders read to decide whether to
    # import a prebuilt module, is left as DeepSpeed wrote it.
    code = """
        import contextlib, io, json
        if REPORT_FIRST:
            import deepspeed.env_report as report
            import deepspeed
        else:
            import deepspeed
            import deepspeed.env_report as report
        import deepspeed.git_version_info as recorded
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            report.op_report(verbose=False)
        lines = [line for line in text.getvalue().splitlines() if "...." in line and "[" in line]
        rows = {line.split()[0]: "[YES]" in line for line in lines}
        compatible = {line.split()[0]: line.rstrip().endswith("[OKAY]\x1b[0m") for line in lines}
        print(json.dumps({"rows": rows, "recorded": recorded.installed_ops,
                          "compatible": compatible}))
    """.replace("REPORT_FIRST", str(report_first))
    env = fresh_env(tmp_path, ACCEL_DEEPSPEED="1")
    env.pop("CCL_ROOT", None)
    found = last_json(run_python(code, env))
    rows = found["rows"]
    assert isinstance(rows, dict)
    for op in (
        "cpu_adam",
        "cpu_adagrad",
        "cpu_lion",
        "fused_adam",
        "async_io",
        "deepspeed_shm_comm",
        "pin_memory",
    ):
        assert rows[op] is True, (op, rows)
    assert rows["deepspeed_ccl_comm"] is False  # DeepSpeed's own builder: not built
    compatible = found["compatible"]
    assert isinstance(compatible, dict)
    # DeepSpeed's ccl builder says "compatible" without oneCCL; its build would fail.
    assert compatible["deepspeed_ccl_comm"] is False
    assert compatible["cpu_adam"] is True
    assert found["recorded"] == dict.fromkeys(found["recorded"], False)  # type: ignore[arg-type]
    assert_no_jit(tmp_path)


def test_the_oneccl_op_is_buildable_only_with_oneccl_installed(tmp_path: pathlib.Path) -> None:
    from accel.integrations.deepspeed._install import ccl_build_problem

    assert ccl_build_problem({}) == "CCL_ROOT is not set (oneCCL's environment is not sourced)"
    root = tmp_path / "oneccl"
    assert ccl_build_problem({"CCL_ROOT": str(root)}) == (
        f"CCL_ROOT={root} has no include/oneapi/ccl.hpp"
    )
    (root / "include" / "oneapi").mkdir(parents=True)
    (root / "include" / "oneapi" / "ccl.hpp").write_text("")
    assert ccl_build_problem({"CCL_ROOT": str(root)}) == f"CCL_ROOT={root} has no lib/libccl.so"
    (root / "lib").mkdir()
    (root / "lib" / "libccl.so.1").write_text("")
    assert ccl_build_problem({"CCL_ROOT": str(root)}) is None
