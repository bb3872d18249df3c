"""DeepSpeed on accel vs native DeepSpeed: start-up, first ZeRO-2 offload step, optimizer
step and inference all-reduce through DeepSpeed's own APIs.

    python benchmarks/deepspeed_integration.py startup      # interpreter start, hook or not
    python benchmarks/deepspeed_integration.py first-step   # process start -> first step
    python benchmarks/deepspeed_integration.py optimizer    # DeepSpeedCPUAdam / FusedAdam
    python benchmarks/deepspeed_integration.py allreduce    # deepspeed.comm.inference_all_reduce

(``first-step --cold`` empties the JIT cache first.)

Native DeepSpeed needs its JIT builds: they go to ``--extensions`` (default
/tmp/ds-extensions; ``--cold`` empties it first, so the first native run pays the
build). accel's runs get an empty directory of their own, checked to stay empty.
Each comparison alternates the two sides run by run (one side per process: the
integration is per process) and reports medians; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv

ROOT = pathlib.Path(__file__).resolve().parent.parent
# accel's start-up hook: the .pth and the module its one line imports.
STARTUP_FILES = (ROOT / "accel-startup.pth", ROOT / "_accel_startup.py")


def _env(accel: bool, extensions: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ACCEL_DEEPSPEED", "DS_ACCELERATOR")}
    env["TORCH_EXTENSIONS_DIR"] = str(extensions)
    if accel:
        env["ACCEL_DEEPSPEED"] = "1"
    else:
        env["DS_ACCELERATOR"] = "cpu"
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")
    return elapsed, result.stdout


# -- start-up ---------------------------------------------------------------------------
def startup(rounds: int) -> None:
    """``python -c pass`` in a bare venv without and with accel's start-up hook (the .pth
    and its module; variable unset), then in this environment with ACCEL_DEEPSPEED unset
    and 1."""
    with tempfile.TemporaryDirectory() as tmp:
        venv.create(tmp, with_pip=False)
        python = str(pathlib.Path(tmp, "bin", "python"))
        where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        site = pathlib.Path(subprocess.check_output([python, "-c", where], text=True).strip())
        env = {k: v for k, v in os.environ.items() if k != "ACCEL_DEEPSPEED"}
        times: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(rounds):
            for side in ("without", "with"):  # alternate: drift hits both sides alike
                for source in STARTUP_FILES:
                    if side == "with":
                        shutil.copy(source, site / source.name)
                    else:
                        (site / source.name).unlink(missing_ok=True)
                if side == "with":  # compiled, as pip compiles what it installs
                    module = str(site / STARTUP_FILES[1].name)
                    compile_it = f"import py_compile; py_compile.compile({module!r})"
                    subprocess.run([python, "-c", compile_it], env=env, check=True)
                for _ in range(10):
                    start = time.perf_counter()
                    subprocess.run([python, "-c", "pass"], env=env, check=True)
                    times[side].append(time.perf_counter() - start)
    # Armed (ACCEL_DEEPSPEED=1) in this environment, where accel is installed.
    armed: dict[str, list[float]] = {"unset": [], "1": []}
    for _ in range(rounds):
        for value in ("unset", "1"):
            env = {k: v for k, v in os.environ.items() if k != "ACCEL_DEEPSPEED"}
            if value == "1":
                env["ACCEL_DEEPSPEED"] = "1"
            for _ in range(5):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
                armed[value].append(time.perf_counter() - start)
    without, with_hook = (statistics.median(times[s]) * 1e3 for s in ("without", "with"))
    unset, armed_ms = (statistics.median(armed[s]) * 1e3 for s in ("unset", "1"))
    print("| interpreter start (`python -c pass`) | median ms |")
    print("|---|---|")
    print(f"| bare venv, without accel's start-up hook | {without:.2f} |")
    print(f"| bare venv, with accel's start-up hook, ACCEL_DEEPSPEED unset | {with_hook:.2f} |")
    print(f"| accel's venv, ACCEL_DEEPSPEED unset | {unset:.2f} |")
    print(f"| accel's venv, ACCEL_DEEPSPEED=1 (DeepSpeed watched) | {armed_ms:.2f} |")
    print(
        f"\nstart-up hook's cost with the variable unset: {with_hook - without:+.2f} ms "
        f"({len(times['with'])} starts each side, alternated)"
    )


# -- first ZeRO-2 offload step ----------------------------------------------------------
FIRST_STEP = r"""
import os, time
start = float(os.environ["BENCH_T0"])
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=os.environ.get("BENCH_PORT", "29631"))
import deepspeed, torch
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
config = {"train_micro_batch_size_per_gpu": 8, "steps_per_print": 1 << 30,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
deepspeed.init_distributed(dist_backend="gloo")
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
loss = engine(torch.randn(8, 1024)).square().mean()
engine.backward(loss)
engine.step()
print("FIRST_STEP", time.time() - start)
"""


def _first_step(accel: bool, extensions: pathlib.Path) -> float:
    env = _env(accel, extensions, BENCH_T0=repr(time.time()), OMP_NUM_THREADS="2")
    _, out = _run([sys.executable, "-c", FIRST_STEP], env)
    return float(
        next(line.split()[1] for line in out.splitlines() if line.startswith("FIRST_STEP"))
    )


def first_step(rounds: int, extensions: pathlib.Path, cold: bool) -> None:
    """Process start to the end of the first ZeRO-2 offload step, both ways."""
    with tempfile.TemporaryDirectory() as ours:
        accel_dir = pathlib.Path(ours)
        rows: list[tuple[str, float]] = []
        if cold:
            shutil.rmtree(extensions, ignore_errors=True)
            rows.append(
                ("native DeepSpeed, cold (JIT-compiles cpu_adam)", _first_step(False, extensions))
            )
            rows.append(("accel on DeepSpeed, first run", _first_step(True, accel_dir)))
        native: list[float] = []
        accel: list[float] = []
        for _ in range(rounds):
            native.append(_first_step(False, extensions))
            accel.append(_first_step(True, accel_dir))
        rows.append((f"native DeepSpeed, warm (median of {rounds})", statistics.median(native)))
        rows.append((f"accel on DeepSpeed, warm (median of {rounds})", statistics.median(accel)))
        assert not any(accel_dir.iterdir()), "accel's run compiled something"
    print("| process start -> first ZeRO-2 offload step done | seconds |")
    print("|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} |")


# -- optimizer step through DeepSpeed's classes ---------------------------------------
OPTIMIZER = r"""
import json, statistics, time, torch
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
torch.manual_seed(0)
result = {}
cases = (
    ("DeepSpeedCPUAdam, fp32", DeepSpeedCPUAdam, torch.float32, {}),
    ("FusedAdam, fp32", FusedAdam, torch.float32, {}),
    ("DeepSpeedCPUAdam, bf16 params, fp32 states", DeepSpeedCPUAdam, torch.bfloat16, {}),
    ("DeepSpeedCPUAdam, bf16 params, bf16 states", DeepSpeedCPUAdam, torch.bfloat16,
     {"fp32_optimizer_states": False}),
)
for name, make, dtype, options in cases:
    sizes = (4_000_000, 4_000_000, 2_000_000)
    params = [torch.nn.Parameter(torch.randn(n).to(dtype)) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = make(params, lr=1e-3, weight_decay=0.01, **options)
    opt.step()
    times = []
    for _ in range(15):
        start = time.perf_counter(); opt.step(); times.append(time.perf_counter() - start)
    result[name] = statistics.median(times) * 1e3
print(json.dumps(result))
"""


def _print_kernel_level() -> None:
    """The level accel's kernels run at (``ACCEL_CPU_ISA`` caps it; the runs inherit it).
    Native DeepSpeed's JIT build uses what this CPU has, whatever the cap."""
    from accel.ops import isa

    print(f"accel's kernels: {isa.describe()}\n")


def optimizer(rounds: int, extensions: pathlib.Path) -> None:
    """One step of 10 M parameters (fp32, or bf16 with fp32 or bf16 states), DeepSpeed's
    classes on each side's kernels."""
    _print_kernel_level()
    with tempfile.TemporaryDirectory() as ours:
        results: dict[str, list[dict[str, dict[str, float]]]] = {"native": [], "accel": []}
        for _ in range(rounds):
            for side in ("native", "accel"):
                directory = pathlib.Path(ours) if side == "accel" else extensions
                env = _env(side == "accel", directory)
                _, out = _run([sys.executable, "-c", OPTIMIZER], env)
                results[side].append(json.loads(out.strip().splitlines()[-1]))
    print("| optimizer step, 10 M params | native DeepSpeed ms | accel ms | speed-up |")
    print("|---|---|---|---|")
    for name in results["native"][0]:
        native = statistics.median(r[name] for r in results["native"])
        accel = statistics.median(r[name] for r in results["accel"])
        print(f"| {name} | {native:.1f} | {accel:.1f} | {native / accel:.2f}x |")


# -- inference all-reduce through deepspeed.comm ----------------------------------------
ALLREDUCE = r"""
import json, os, statistics, time, torch
import deepspeed, deepspeed.comm as dist
deepspeed.init_distributed(dist_backend="gloo")
result = {}
for dtype in (torch.float32, torch.bfloat16):
    for size in (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
        t = torch.ones(size // torch.empty(0, dtype=dtype).element_size(), dtype=dtype)
        iters = max(5, min(500, (64 << 20) // size))
        for _ in range(3):
            dist.inference_all_reduce(t)
        dist.barrier()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.inference_all_reduce(t)
            times.append(time.perf_counter() - start)
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        result[f"{str(dtype)[6:]} {label}"] = {
            "median": statistics.median(times) * 1e6, "mean": statistics.fmean(times) * 1e6,
        }
if dist.get_rank() == 0:
    print("RESULT " + json.dumps(result))
dist.destroy_process_group()
"""


def allreduce(rounds: int, extensions: pathlib.Path) -> None:
    """``deepspeed.comm.inference_all_reduce`` on 2 ranks, DeepSpeed's op vs accel's."""
    _print_kernel_level()
    with tempfile.TemporaryDirectory() as ours:
        script = pathlib.Path(ours, "allreduce.py")
        script.write_text(ALLREDUCE)
        accel_dir = pathlib.Path(ours, "extensions")
        accel_dir.mkdir()
        results: dict[str, list[dict[str, dict[str, float]]]] = {"native": [], "accel": []}
        for _ in range(rounds):
            for side in ("native", "accel"):
                directory = accel_dir if side == "accel" else extensions
                # DeepSpeed's op needs LOCAL_SIZE (it segfaults without it); accel's does not.
                env = _env(side == "accel", directory, OMP_NUM_THREADS="1", LOCAL_SIZE="2")
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc-per-node=2", str(script)]  # fmt: skip
                _, out = _run(cmd, env)
                line = next(x for x in out.splitlines() if x.startswith("RESULT "))
                results[side].append(json.loads(line[len("RESULT ") :]))
        for leftover in pathlib.Path("/dev/shm").glob("deepspeed_allreduce_buffer*"):
            leftover.unlink()  # DeepSpeed's op leaves its segments behind
    # Per size: the per-call median and the mean over all calls (a slow call now and then
    # weighs in the mean only), each the median over the rounds; speed-up = native / accel.
    print("| inference_all_reduce, 2 ranks | median us: native, accel | speed-up "
          "| mean us: native, accel | speed-up |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in results["native"][0]:
        cells = []
        for statistic in ("median", "mean"):
            native = statistics.median(r[name][statistic] for r in results["native"])
            accel = statistics.median(r[name][statistic] for r in results["accel"])
            cells.append(f"{native:.1f}, {accel:.1f} | {native / accel:.2f}x")
        print(f"| {name} | {' | '.join(cells)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["startup", "first-step", "optimizer", "allreduce"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="first-step: empty the JIT cache first")
    parser.add_argument(
        "--extensions", type=pathlib.Path, default=pathlib.Path("/tmp/ds-extensions")
    )
    args = parser.parse_args()
    if args.what == "startup":
        startup(max(args.rounds, 10))
    elif args.what == "first-step":
        first_step(args.rounds, args.extensions, args.cold)
    elif args.what == "optimizer":
        optimizer(args.rounds, args.extensions)
    else:
        allreduce(args.rounds, args.extensions)


if __name__ == "__main__":
    main()
