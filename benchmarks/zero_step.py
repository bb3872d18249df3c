"""DeepSpeed ZeRO-1/2 training step on the CPU: the "accel" backend against gloo.

    python benchmarks/zero_step.py [--ranks 2] [--width 2048] [--layers 12] [--stages 1,2]
                                   [--rounds 3] [--steps 8] [--steady-malloc]

DeepSpeed 0.19.8 on accel (``ACCEL_DEEPSPEED=1``) trains the same MLP (``--layers`` x
Linear(``--width``), fp32, Adam, micro-batch 8) under ZeRO stage 1 and 2, one torchrun job
per variant, the variants alternating ``--rounds`` times; each job reports its median step
(after two warm-up steps) and its losses. The variants: ``deepspeed.init_distributed`` with
gloo; with "accel" (ZeRO's flat gradient buckets made in the group's pool:
accel.integrations.deepspeed.zero); with "accel" and ``ACCEL_ZERO_POOL=0`` ("accel-copying":
the buckets where DeepSpeed makes them, copied through the segment); and with "no
exchange", a process group whose collectives return at once, leaving every buffer as it
is: the same ranks, engine and steps with no bytes exchanged (its losses are not the
others'). It is the floor for the exchange, not for the step: its flat buckets are still
DeepSpeed's new ``torch.cat`` every call, whose fresh pages a pooled bucket does not pay
for, so "accel" can end below it. The share of
gloo's exchange cost a variant removes is ``(gloo - variant) / (gloo - floor)`` per round;
the median and mean over rounds are printed. ``--steady-malloc`` fixes glibc's malloc
thresholds in the ranks (``_jobs.STEADY_MALLOC`` says why).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from _jobs import job_env, run_job, share_removed

WORKER = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist
import accel.process_group  # registers "accel"
backend, stage, width, layers, steps = sys.argv[1], *map(int, sys.argv[2:6])

if backend == "no-exchange":
    class Done(dist.Work):
        def __init__(self, result):
            super().__init__()
            self.future = torch.futures.Future()
            self.future.set_result(result)
        def wait(self, timeout=None):
            return True
        def get_future(self):
            return self.future
        def is_completed(self):
            return True

    class NoExchange(dist.ProcessGroup):
        def __init__(self, store, rank, size, timeout):
            super().__init__(rank, size)
        def getBackendName(self):
            return "no-exchange"
        def allreduce(self, tensors, opts=None):
            return Done(tensors)
        def allreduce_coalesced(self, tensors, opts=None):
            return Done(tensors)
        def allgather(self, outputs, inputs, opts=None):
            return Done(outputs)
        def _allgather_base(self, output, input, opts=None):
            return Done([output])
        all_gather_single = _allgather_base
        def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
            return Done(outputs)
        def reduce_scatter(self, outputs, inputs, opts=None):
            return Done(outputs)
        def _reduce_scatter_base(self, output, input, opts=None):
            return Done([output])
        reduce_scatter_single = _reduce_scatter_base
        def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
            return Done(outputs)
        def broadcast(self, tensors, opts=None):
            return Done(tensors)
        def reduce(self, tensors, opts=None):
            return Done(tensors)
        def barrier(self, opts=None):
            return Done([])

    dist.Backend.register_backend("no-exchange", NoExchange, devices=["cpu"])

import deepspeed
deepspeed.init_distributed(dist_backend=backend)
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
config = {
    "train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": stage},
    "steps_per_print": 1 << 30,
}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
gen = torch.Generator().manual_seed(rank)
times, losses = [], []
for _ in range(steps):
    x = torch.randn(8, width, generator=gen)
    start = time.perf_counter()
    loss = engine(x).square().mean()
    engine.backward(loss)
    engine.step()
    times.append(time.perf_counter() - start)
    losses.append(loss.item())
if rank == 0:
    params = sum(p.numel() for p in model.parameters())
    median = sorted(times[2:])[len(times[2:]) // 2]
    print("RESULT " + json.dumps({"params": params, "step_s": median, "losses": losses}))
engine.destroy()
dist.destroy_process_group()
"""

# variant -> (its torch.distributed backend, its ranks' extra environment)
SETUP = {
    "gloo": ("gloo", {}),
    "accel": ("accel", {}),
    "accel-copying": ("accel", {"ACCEL_ZERO_POOL": "0"}),
    "no-exchange": ("no-exchange", {}),
}
VARIANTS = tuple(SETUP)


def main() -> None:
    """Run every variant and stage in turn and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--stages", default="1,2")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--steady-malloc", action="store_true", help="fix glibc's malloc thresholds in the ranks"
    )
    args = parser.parse_args()
    stages = [int(stage) for stage in args.stages.split(",")]
    env = job_env(args.steady_malloc, ACCEL_DEEPSPEED="1")
    results: dict[tuple[int, str], list[dict[str, object]]] = {
        (stage, name): [] for stage in stages for name in VARIANTS
    }
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "zero_worker.py")
        with open(script, "w") as out:
            out.write(WORKER)
        for _ in range(args.rounds):
            for stage in stages:
                for name in VARIANTS:
                    backend, extra = SETUP[name]
                    job = [backend, str(stage), str(args.width), str(args.layers), str(args.steps)]
                    results[stage, name].append(run_job(script, args.ranks, job, env | extra))
    params = float(results[stages[0], "gloo"][0]["params"])  # type: ignore[arg-type]
    print(f"| ZeRO step, {params / 1e6:.0f}M params, {args.ranks} ranks | median s | mean s | "
          "share of gloo's exchange removed, median (mean) |")  # fmt: skip
    print("|---|---|---|---|")
    for stage in stages:

        def steps(name: str, stage: int = stage) -> list[float]:
            return [float(r["step_s"]) for r in results[stage, name]]  # type: ignore[arg-type]

        for name in VARIANTS:
            shares = [
                share_removed(gloo, mine, floor)
                for gloo, mine, floor in zip(
                    steps("gloo"), steps(name), steps("no-exchange"), strict=True
                )
            ]
            print(f"| ZeRO-{stage}, {name} | {statistics.median(steps(name)):.3f} | "
                  f"{statistics.mean(steps(name)):.3f} | {statistics.median(shares):.2f} "
                  f"({statistics.mean(shares):.2f}) |")  # fmt: skip
        same = all(
            a["losses"] == b["losses"] == c["losses"]
            for a, b, c in zip(
                results[stage, "gloo"],
                results[stage, "accel"],
                results[stage, "accel-copying"],
                strict=True,
            )
        )
        print(f"| ZeRO-{stage}: accel's losses identical to gloo's | {same} | | |")


if __name__ == "__main__":
    main()
