"""CPU DDP training step: the "accel" torch.distributed backend against gloo.

    python benchmarks/ddp.py [--ranks 2] [--width 4096] [--layers 6] [--batch 8] [--rounds 3]

Trains the same ~100M-parameter MLP (6 x Linear(4096, 4096)) with unmodified
DistributedDataParallel, one torchrun job per backend, alternating ``--rounds`` times;
each job reports the median step time (after one warm-up step) and its losses, which must
be identical between the backends. A third job, "no exchange", runs the same ranks and
steps without DDP (no gradient communication at all): the floor no backend can beat, so
gloo / floor bounds the speed-up any backend can reach on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = r"""
import json, os, sys, time, torch, torch.distributed as dist
import accel.process_group  # registers "accel"
backend, width, layers, batch, steps = sys.argv[1], *map(int, sys.argv[2:6])
dist.init_process_group("gloo" if backend == "none" else backend)
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
ddp = model if backend == "none" else torch.nn.parallel.DistributedDataParallel(model)
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
    print("RESULT " + json.dumps({"params": params, "step_s": median, "losses": losses}))
dist.destroy_process_group()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, object]]] = {"gloo": [], "accel": [], "none": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ddp_worker.py")
        with open(script, "w") as out:
            out.write(WORKER)
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        for _ in range(args.rounds):
            for backend in ("gloo", "accel", "none"):
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc-per-node={args.ranks}", script, backend, str(args.width),
                       str(args.layers), str(args.batch), str(args.steps)]  # fmt: skip
                out = subprocess.run(
                    cmd, env=env, capture_output=True, text=True, check=True
                ).stdout
                line = next(x for x in out.splitlines() if x.startswith("RESULT "))
                results[backend].append(json.loads(line[len("RESULT ") :]))
    gloo = statistics.median(float(r["step_s"]) for r in results["gloo"])  # type: ignore[arg-type]
    ours = statistics.median(float(r["step_s"]) for r in results["accel"])  # type: ignore[arg-type]
    floor = statistics.median(float(r["step_s"]) for r in results["none"])  # type: ignore[arg-type]
    same = all(
        a["losses"] == b["losses"] for a, b in zip(results["gloo"], results["accel"], strict=True)
    )
    params = results["gloo"][0]["params"]
    title = f"DDP step, {params / 1e6:.0f}M params, {args.ranks} ranks, batch {args.batch}"
    print(f"| {title} | seconds |")
    print("|---|---|")
    print(f"| gloo | {gloo:.3f} |")
    print(f"| accel | {ours:.3f} |")
    print(f"| no exchange (floor) | {floor:.3f} |")
    bound = gloo / floor
    print(f"\nspeed-up {gloo / ours:.2f}x (at most {bound:.2f}x here); losses identical: {same}")


if __name__ == "__main__":
    main()
