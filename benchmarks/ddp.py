"""CPU DDP training step: the "accel" torch.distributed backend against gloo.

    python benchmarks/ddp.py [--ranks 2] [--width 4096] [--layers 6] [--batch 8] [--rounds 3]
                             [--bucket-view] [--steady-malloc] [--interleaved]

Trains the same MLP (``--layers`` x Linear(``--width``); 101M parameters by default) with
unmodified DistributedDataParallel, one torchrun job per variant, the variants alternating
``--rounds`` times; each job reports the median step time (after one warm-up step) and its
losses, which must be identical between the backends. The variants: gloo; "accel"; "accel"
with ``ACCEL_DDP_POOL=0`` (DDP's buckets stay where DDP put them: the copying path); and
"DDP, no exchange", DDP on a gloo group with a comm hook that hands each bucket back
unreduced (DDP's own work: its copies between gradients and buckets, its hooks), the floor
a backend can reach; and "no DDP", the same ranks and steps without DDP. Per round, the
share of gloo's exchange cost a variant removes is ``(gloo - variant) / (gloo - floor)``,
against each floor; the median and mean over rounds are printed.

``--bucket-view`` builds every DDP with ``gradient_as_bucket_view=True`` (no copies between
gradients and buckets). ``--steady-malloc`` fixes glibc's malloc thresholds in the ranks
(``_jobs.STEADY_MALLOC`` says why).

``--interleaved`` runs the four variants in one job instead (one model each, on their own
groups, taking their steps in turn), so that a noisy machine slows them alike; it prints
the median step of each and the shares of their medians, and the same for the backward
pass alone (where DDP exchanges its buckets; the forward pass and the optimizer step only
add their spread).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from _jobs import job_env, run_job, share_removed

WORKER = r"""
import json, os, sys, time, torch, torch.distributed as dist
import accel.process_group  # registers "accel"
backend, width, layers, batch, steps, view = sys.argv[1], *map(int, sys.argv[2:7])
dist.init_process_group(
    {"none": "gloo", "ddp-no-exchange": "gloo", "accel-copying": "accel"}.get(backend, backend)
)
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
ddp = model if backend == "none" else torch.nn.parallel.DistributedDataParallel(
    model, gradient_as_bucket_view=bool(view)
)
if backend == "ddp-no-exchange":
    def unreduced(state, bucket):
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future
    ddp.register_comm_hook(None, unreduced)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(rank)
times, losses = [], []
for _ in range(steps):
    x = torch.randn(batch, width, generator=gen)
    start = time.perf_counter()
    loss = ddp(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - start)
    losses.append(loss.item())
if rank == 0:
    params = sum(p.numel() for p in model.parameters())
    median = sorted(times[1:])[len(times[1:]) // 2]
    group = dist.group.WORLD
    pooled = getattr(getattr(group, "promotions", None), "moved_buffers", 0)
    print("RESULT " + json.dumps(
        {"params": params, "step_s": median, "losses": losses, "pooled_buckets": pooled}
    ))
dist.destroy_process_group()
"""


INTERLEAVED = r"""
import json, os, statistics, sys, time, torch, torch.distributed as dist
import accel.process_group  # registers "accel"
width, layers, batch, steps, view = map(int, sys.argv[1:6])
dist.init_process_group("accel")
rank = dist.get_rank()
os.environ["ACCEL_DDP_POOL"] = "0"  # read when a group is made
copying = dist.new_group(backend="accel")
del os.environ["ACCEL_DDP_POOL"]
gloo = dist.new_group(backend="gloo")
def unreduced(state, bucket):
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future
runs = {}
for name, group in (("accel", dist.group.WORLD), ("accel-copying", copying), ("gloo", gloo),
                    ("ddp-no-exchange", gloo), ("none", None)):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    if group is not None:
        model = torch.nn.parallel.DistributedDataParallel(
            model, process_group=group, gradient_as_bucket_view=bool(view)
        )
    if name == "ddp-no-exchange":
        model.register_comm_hook(None, unreduced)
    runs[name] = (model, torch.optim.SGD(model.parameters(), lr=1e-3), [], [])
gen = torch.Generator().manual_seed(rank)
for _ in range(steps):
    x = torch.randn(batch, width, generator=gen)
    for model, opt, times, backwards in runs.values():
        start = time.perf_counter()
        loss = model(x).square().mean()
        forward_end = time.perf_counter()
        loss.backward()
        backwards.append(time.perf_counter() - forward_end)
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
if rank == 0:
    medians = {name: statistics.median(run[2][2:]) for name, run in runs.items()}
    backward = {name: statistics.median(run[3][2:]) for name, run in runs.items()}
    pooled = dist.group.WORLD.promotions.moved_buffers
    print("RESULT " + json.dumps(
        {"medians": medians, "backward": backward, "pooled_buckets": pooled}
    ))
dist.destroy_process_group()
"""


def _interleaved(args: argparse.Namespace, env: dict[str, str], tmp: str) -> None:
    script = os.path.join(tmp, "ddp_interleaved.py")
    with open(script, "w") as out:
        out.write(INTERLEAVED)
    job = [str(args.width), str(args.layers), str(args.batch), str(args.steps),
           str(int(args.bucket_view))]  # fmt: skip
    result = run_job(script, args.ranks, job, env)
    medians, backward = result["medians"], result["backward"]
    assert isinstance(medians, dict)
    assert isinstance(backward, dict)
    gloo, ddp_floor, floor = medians["gloo"], medians["ddp-no-exchange"], medians["none"]
    print("| DDP step, variants interleaved in one job | median s | share of gloo's cost "
          "removed, floor DDP with no exchange | floor no DDP | backward alone s | "
          "share, backward alone, floor DDP with no exchange |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, seconds in medians.items():
        back = backward[name]
        back_share = share_removed(backward["gloo"], back, backward["ddp-no-exchange"])
        print(f"| {name} | {seconds:.3f} | {share_removed(gloo, seconds, ddp_floor):.2f} | "
              f"{share_removed(gloo, seconds, floor):.2f} | {back:.3f} | "
              f"{back_share:.2f} |")  # fmt: skip
    print(f"\nbuckets in the pool (rank 0): {result['pooled_buckets']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interleaved", action="store_true", help="all variants in one job")
    parser.add_argument(
        "--bucket-view", action="store_true", help="DDP(gradient_as_bucket_view=True)"
    )
    parser.add_argument(
        "--steady-malloc", action="store_true", help="fix glibc's malloc thresholds in the ranks"
    )
    args = parser.parse_args()
    env = job_env(args.steady_malloc)
    if args.interleaved:
        with tempfile.TemporaryDirectory() as tmp:
            _interleaved(args, env, tmp)
        return
    variants = ("gloo", "accel", "accel-copying", "ddp-no-exchange", "none")
    results: dict[str, list[dict[str, object]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ddp_worker.py")
        with open(script, "w") as out:
            out.write(WORKER)
        for _ in range(args.rounds):
            for backend in variants:
                job = [backend, str(args.width), str(args.layers), str(args.batch),
                       str(args.steps), str(int(args.bucket_view))]  # fmt: skip
                pool = "0" if backend == "accel-copying" else "1"
                results[backend].append(
                    run_job(script, args.ranks, job, dict(env, ACCEL_DDP_POOL=pool))
                )

    def steps(name: str) -> list[float]:
        return [float(r["step_s"]) for r in results[name]]  # type: ignore[arg-type]

    same = all(
        a["losses"] == b["losses"] == c["losses"]
        for a, b, c in zip(results["gloo"], results["accel"], results["accel-copying"], strict=True)
    )
    params = float(results["gloo"][0]["params"])  # type: ignore[arg-type]
    title = f"DDP step, {params / 1e6:.0f}M params, {args.ranks} ranks, batch {args.batch}"
    if args.bucket_view:
        title += ", gradient_as_bucket_view"

    def shares(name: str, floor: str) -> list[float]:
        return [
            share_removed(gloo, mine, low)
            for gloo, mine, low in zip(steps("gloo"), steps(name), steps(floor), strict=True)
        ]

    print(f"| {title} | median s | mean s | share of gloo's exchange removed, median (mean): "
          "floor DDP with no exchange | floor no DDP |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name, label in (("gloo", "gloo"), ("accel", "accel"),
                        ("accel-copying", "accel, ACCEL_DDP_POOL=0"),
                        ("ddp-no-exchange", "DDP, no exchange (floor)"),
                        ("none", "no DDP (floor)")):  # fmt: skip
        cells = [
            f"{statistics.median(s):.2f} ({statistics.mean(s):.2f})"
            for s in (shares(name, "ddp-no-exchange"), shares(name, "none"))
        ]
        print(
            f"| {label} | {statistics.median(steps(name)):.3f} | {statistics.mean(steps(name)):.3f}"
            f" | {cells[0]} | {cells[1]} |"
        )
    pooled = [r["pooled_buckets"] for r in results["accel"]]
    print(f"\nlosses identical: {same}; buckets in the pool per accel job (rank 0): {pooled}")


if __name__ == "__main__":
    main()
