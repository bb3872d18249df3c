"""DeepSpeed on accel, end to end, each case in fresh processes (installing is per process).

Covers the three ways to activate it, both import orders, the startup hook's cost and
errors, DeepSpeed's own optimizers and comm op on accel's kernels, and ZeRO 0-3 training
against stored native-DeepSpeed losses with an extensions directory that must stay empty.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("deepspeed")

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "ds_scripts"
REFERENCE = json.loads((SCRIPTS / "zero_reference.json").read_text())


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ACCEL_DEEPSPEED", "DS_ACCELERATOR")}
    extensions = tmp_path / "torch_extensions"
    extensions.mkdir(exist_ok=True)
    env.update(TORCH_EXTENSIONS_DIR=str(extensions), OMP_NUM_THREADS="1", **extra)
    return env


def _python(
    code: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _last_json(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _assert_no_jit(tmp_path: pathlib.Path) -> None:
    assert not any((tmp_path / "torch_extensions").iterdir()), "something was JIT-compiled"


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
    }}))
"""
ACCEL_BUILDERS = ["accel.integrations.deepspeed.op_builders"]


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
    env = _env(tmp_path) if env_value is None else _env(tmp_path, ACCEL_DEEPSPEED=env_value)
    facts = _last_json(_python(PROBE.format(before=before, after=after), env))
    assert facts == {
        "torch_at_start": False,  # the startup hook never imports torch by itself
        "accelerator": "AccelDeepSpeedAccelerator",
        "active": True,
        "bound": ACCEL_BUILDERS,
        "captured": "AccelDeepSpeedAccelerator",
        "compatible": True,
    }
    _assert_no_jit(tmp_path)


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
        [sys.executable, str(script)], env=_env(tmp_path, ACCEL_DEEPSPEED="1"),
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert _last_json(result) == {"child": "AccelDeepSpeedAccelerator"}


def test_without_the_variable_deepspeed_is_untouched(tmp_path: pathlib.Path) -> None:
    code = """
        import json, sys
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        print(json.dumps({"accelerator": type(get_accelerator()).__name__,
                          "accel_imported": "accel" in sys.modules}))
    """
    facts = _last_json(_python(code, _env(tmp_path, ACCEL_DEEPSPEED="0")))
    assert facts == {"accelerator": "CPU_Accelerator", "accel_imported": False}


def test_bad_variable_value_is_an_error_naming_it(tmp_path: pathlib.Path) -> None:
    result = _python("import deepspeed", _env(tmp_path, ACCEL_DEEPSPEED="yes"))
    assert result.returncode != 0
    message = "environment variable ACCEL_DEEPSPEED must be 0 or 1, got 'yes'"
    assert message in result.stderr  # said once at start-up, raised on import
    assert f"ValueError: {message}" in result.stderr
    quiet = _python("print('no deepspeed here')", _env(tmp_path, ACCEL_DEEPSPEED="yes"))
    assert quiet.returncode == 0
    assert quiet.stderr.count(message) == 1


def test_startup_hook_does_nothing_without_the_variable(tmp_path: pathlib.Path) -> None:
    code = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith(('accel', 'torch', 'deepspeed')))))"
    assert _last_json_list(_python(code, _env(tmp_path))) == []
    armed = _last_json_list(_python(code, _env(tmp_path, ACCEL_DEEPSPEED="1")))
    assert not [m for m in armed if m.startswith(("torch", "deepspeed"))]


def _last_json_list(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr[-4000:]
    value: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return value


def test_without_deepspeed_installed_the_hook_says_so_at_debug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from accel.integrations.deepspeed import _install, _startup

    monkeypatch.setenv("ACCEL_DEEPSPEED", "1")
    monkeypatch.setattr(_startup, "is_installed", lambda: False)
    armed: list[bool] = []
    monkeypatch.setattr(_install, "arm", lambda: armed.append(True))
    with caplog.at_level("DEBUG", logger="accel.integrations.deepspeed"):
        _startup.run()
    assert not armed
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "deepspeed is not installed" in caplog.records[0].getMessage()


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
    result = _python("import deepspeed", _env(tmp_path, ACCEL_DEEPSPEED="1", DS_ACCELERATOR="cuda"))
    assert result.returncode != 0
    assert "DS_ACCELERATOR='cuda'" in result.stderr
    assert "accel selected 'cpu'" in result.stderr


def test_deepspeeds_optimizers_run_on_accels_kernels(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "ds_optimizers.py")], env=_env(tmp_path, ACCEL_DEEPSPEED="1"),
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    facts = _last_json(result)
    assert facts.pop("builders") == ACCEL_BUILDERS * 2
    assert all(isinstance(d, float) and d < 5e-6 for d in facts.values()), facts
    _assert_no_jit(tmp_path)


def _torchrun(
    script: pathlib.Path, ranks: int, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
         "--standalone", str(script), *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["gloo", "accel"])
def test_inference_all_reduce_through_deepspeed_comm(tmp_path: pathlib.Path, backend: str) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    result = _torchrun(
        SCRIPTS / "ds_inference_all_reduce.py", 2, _env(tmp_path, ACCEL_DEEPSPEED="1"), backend
    )
    assert _last_json(result) == {
        "checked": 20,
        "world": 2,
        "owner": "accel",
        "shared_memory": True,
        "backend": backend,
    }
    assert set(os.listdir("/dev/shm")) <= shm_before  # nothing left behind
    _assert_no_jit(tmp_path)


def _compare_losses(got: dict[str, list[float]], want: dict[str, list[float]]) -> None:
    assert got.keys() == want.keys()
    for key, losses in want.items():
        # fp32: the kernels differ from DeepSpeed's in the last bit of a few master
        # weights. bf16: such a bit can flip one bf16 rounding (2**-8 relative) later on.
        tolerance = 1e-5 if "fp32" in key else 1e-2
        for step, (a, b) in enumerate(zip(got[key], losses, strict=True)):
            assert abs(a - b) <= tolerance * abs(b), f"{key} step {step}: {a} vs native {b}"


def test_zero_stages_match_native_deepspeed_on_one_rank(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "losses.json"
    env = _env(tmp_path, ACCEL_DEEPSPEED="1", MASTER_PORT=str(29500 + os.getpid() % 1000))
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "zero_parity.py"), "--world", "1", "--out", str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    _compare_losses(json.loads(out.read_text())["losses"], REFERENCE["1"])
    _assert_no_jit(tmp_path)


def test_zero_stages_match_native_deepspeed_on_two_ranks(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "losses.json"
    result = _torchrun(SCRIPTS / "zero_parity.py", 2, _env(tmp_path, ACCEL_DEEPSPEED="1"),
                       "--world", "2", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    _compare_losses(json.loads(out.read_text())["losses"], REFERENCE["2"])
    _assert_no_jit(tmp_path)


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
        env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert _last_json(result) == {"rank": "0", "accelerator": "AccelDeepSpeedAccelerator"}


def test_report_has_a_deepspeed_section(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accel", "report", "--json"], env=_env(tmp_path, ACCEL_DEEPSPEED="1"),
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    section = json.loads(result.stdout)["deepspeed"]
    assert section["supported"] is True
    assert section["env"] == "1"
    assert section["version"].startswith("0.19.")
    assert "FusedLionBuilder" in section["accel_builders"]


def test_deepspeeds_swap_utilities_run_on_accel_io(tmp_path: pathlib.Path) -> None:
    code = f"""
        import json, torch
        from deepspeed.ops.op_builder import AsyncIOBuilder
        from deepspeed.runtime.swap_tensor.utils import swap_in_tensors, swap_out_tensors
        handle = AsyncIOBuilder().load().aio_handle(1 << 20, 8, False, False, 1)
        tensors = [torch.randn(n) for n in (1000, 300_000, 4097)]
        paths = [r"{tmp_path}/%d.swp" % i for i in range(3)]
        swap_out_tensors(handle, tensors, paths)
        assert handle.wait() == 3
        back = [torch.empty_like(t) for t in tensors]
        swap_in_tensors(handle, back, paths)
        assert handle.wait() == 3
        print(json.dumps({{"equal": all(torch.equal(a, b) for a, b in zip(tensors, back)),
                          "builder": AsyncIOBuilder.__module__}}))
    """
    facts = _last_json(_python(code, _env(tmp_path, ACCEL_DEEPSPEED="1")))
    assert facts == {"equal": True, "builder": ACCEL_BUILDERS[0]}
    _assert_no_jit(tmp_path)
