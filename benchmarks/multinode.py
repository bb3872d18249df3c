"""Two simulated nodes of two ranks: accel's two-level collectives against flat gloo.

    sudo python benchmarks/multinode.py [--sizes-mib 16,64] [--rounds 5] [--rate 1gbit]
        [--no-throttle] [--collective all_reduce|all_gather|reduce_scatter]

Makes two network namespaces joined by a veth pair whose both ends are rate-limited with
a ``tc tbf`` token bucket (``--rate``; the machine this was written on has no ``netem``,
so the link adds no delay of its own), runs ranks 0-1 in one ("node 0") and ranks 2-3
in the other, and removes both on exit. Inside a namespace the two ranks reach each other
without touching the veth (their own address routes over the namespace's loopback), so only
traffic between the simulated nodes crosses the throttled link, as between real nodes.
Ranks of a node share memory; ``ACCEL_NODE_ID`` tells accel which ranks form a node.

Every round times one flat gloo collective and accel.comm's (``all_reduce_``:
reduce-scatter in shared memory, all-reduce of each rank's half over gloo between the
nodes, all-gather in shared memory; ``all_gather_into_tensor_`` and
``reduce_scatter_tensor_``: gloo between the ranks at one position, shared memory in the
node) on the same float32 tensors, in alternating order, and counts the bytes node 0 sent
over the veth during each (``tx_bytes``); accel.comm's again on tensors from
``comm.shared_empty`` (in the node's segment: the node's steps go straight between the
ranks' tensors). Prints the medians per size, the speed-up as the median of per-round
ratios, and the pooled call's time over the plain two-level call's (the median of
per-round ratios). Needs root (``ip netns``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator

NAMESPACES = ("accel-bench-n0", "accel-bench-n1")
LINKS = ("accel-bv0", "accel-bv1")
ADDRESSES = ("10.213.7.1", "10.213.7.2")

WORKER = r"""
import json, os, sys, time, torch, torch.distributed as dist
from accel import comm
sizes = [int(s) for s in sys.argv[1].split(",")]
rounds, link, out, collective = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
def sent():
    with open(f"/sys/class/net/{link}/statistics/tx_bytes") as f:
        return int(f.read())
def timed(call):
    dist.barrier()
    before, start = sent(), time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    dist.barrier()  # every rank done: the byte count covers the whole collective
    return seconds, sent() - before
results = {}
for mib in sizes:
    # MiB: the whole tensor (all-reduce's, all-gather's output, reduce-scatter's input).
    counts = (mib << 20) // 4, (mib << 20) // 4 // world
    def tensors(pooled):  # pooled: in the node's shared segment (comm.shared_empty)
        make = comm.shared_empty if pooled else torch.empty
        return tuple(make(count).fill_(1.0) for count in counts)
    if collective == "all_reduce":
        call = {"gloo": lambda w, p: dist.all_reduce(w), "accel": lambda w, p: comm.all_reduce_(w)}
        reset, check = lambda w, p: w.fill_(1.0), lambda w, p: float(w[0]) == world
    elif collective == "all_gather":
        call = {"gloo": lambda w, p: dist.all_gather_into_tensor(w, p),
                "accel": lambda w, p: comm.all_gather_into_tensor_(w, p)}
        reset, check = lambda w, p: w.zero_(), lambda w, p: bool(w.eq(1.0).all())
    else:
        call = {"gloo": lambda w, p: dist.reduce_scatter_tensor(p, w),
                "accel": lambda w, p: comm.reduce_scatter_tensor_(p, w)}
        reset, check = lambda w, p: p.zero_(), lambda w, p: bool(p.eq(world).all())
    held = {"gloo": tensors(False), "two_level": tensors(False), "pooled": tensors(True)}
    ways = {name: (lambda c=call["gloo" if name == "gloo" else "accel"], t=t: c(*t))
            for name, t in held.items()}
    for name, run in ways.items():  # warm-up: connections, segments, sub-groups
        run()
        reset(*held[name])
    rows = {name: [] for name in ways}
    for r in range(rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in order:
            rows[name].append(timed(ways[name]))
            assert check(*held[name]), (collective, name)
            reset(*held[name])
    results[mib] = rows
if rank == 0:
    with open(out, "w") as f:
        json.dump(results, f)
dist.destroy_process_group()
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


@contextlib.contextmanager
def throttled_nodes(rate: str | None) -> Iterator[None]:
    """Two namespaces joined by a veth pair, throttled both ways; removed on exit."""
    for namespace in NAMESPACES:
        subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)
    try:
        for namespace in NAMESPACES:
            _ip("netns", "add", namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("link", "add", LINKS[0], "netns", NAMESPACES[0], "type", "veth", "peer", "name",
            LINKS[1], "netns", NAMESPACES[1])  # fmt: skip
        for namespace, link, address in zip(NAMESPACES, LINKS, ADDRESSES, strict=True):
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", namespace, "link", "set", link, "up")
            if rate is not None:
                subprocess.run(
                    ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", link, "root",
                     "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"],
                    check=True,
                )  # fmt: skip
        yield
    finally:
        for namespace in NAMESPACES:  # deleting a namespace deletes its end of the veth
            subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)


def run(
    sizes: list[int], rounds: int, port: int, collective: str
) -> dict[str, dict[str, list[list[float]]]]:
    """One job of 2 x 2 ranks; rank 0's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        script, out = os.path.join(tmp, "worker.py"), os.path.join(tmp, "out.json")
        with open(script, "w") as file:
            file.write(WORKER)
        processes = []
        for rank in range(4):
            node = rank // 2
            env = dict(
                os.environ, ACCEL_NODE_ID=f"bench-node{node}", MASTER_ADDR=ADDRESSES[0],
                MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank % 2),
                GLOO_SOCKET_IFNAME=LINKS[node], OMP_NUM_THREADS="1",
            )  # fmt: skip
            command = ["ip", "netns", "exec", NAMESPACES[node], sys.executable, script,
                       ",".join(map(str, sizes)), str(rounds), LINKS[node], out,
                       collective]  # fmt: skip
            processes.append(subprocess.Popen(command, env=env))
        for process in processes:
            if process.wait(timeout=1800) != 0:
                raise SystemExit(f"a rank failed (exit {process.returncode})")
        with open(out) as file:
            result: dict[str, dict[str, list[list[float]]]] = json.load(file)
            return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="16,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", default="1gbit", help="tc tbf rate of each direction")
    parser.add_argument("--no-throttle", action="store_true", help="veth at full speed")
    parser.add_argument("--port", type=int, default=29611)
    parser.add_argument(
        "--collective", choices=("all_reduce", "all_gather", "reduce_scatter"),
        default="all_reduce", help="MiB is the whole tensor: all-gather's output, "
        "reduce-scatter's input",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    rate = None if args.no_throttle else args.rate
    print(f"{args.collective}, 2 nodes x 2 ranks on {os.cpu_count()} cores; link: "
          f"{'unthrottled veth' if rate is None else f'{rate} each way (tc tbf)'}")  # fmt: skip
    with throttled_nodes(rate):
        results = run(sizes, args.rounds, args.port, args.collective)
    print(f"{'MiB':>5} {'gloo s':>9} {'2-level s':>10} {'speed-up':>9} "
          f"{'gloo B/node':>12} {'2-level B/node':>15} {'bytes ratio':>12} "
          f"{'pooled s':>9} {'pooled / 2-level':>17}")  # fmt: skip
    for mib, rows in results.items():
        flat, two, pooled = rows["gloo"], rows["two_level"], rows["pooled"]
        speedups = [f[0] / t[0] for f, t in zip(flat, two, strict=True)]
        pooled_ratios = [p[0] / t[0] for p, t in zip(pooled, two, strict=True)]
        flat_bytes = statistics.median(b for _, b in flat)
        two_bytes = statistics.median(b for _, b in two)
        flat_s, two_s = statistics.median(s for s, _ in flat), statistics.median(s for s, _ in two)
        print(
            f"{mib:>5} {flat_s:>9.3f} {two_s:>10.3f} {statistics.median(speedups):>8.2f}x "
            f"{flat_bytes:>12.0f} {two_bytes:>15.0f} {two_bytes / flat_bytes:>12.2f} "
            f"{statistics.median(s for s, _ in pooled):>9.3f} "
            f"{statistics.median(pooled_ratios):>16.2f}x"
        )
    print(
        "B/node: bytes node 0 sent to node 1 during one collective (veth tx_bytes, headers "
        f"included); tensor bytes: {', '.join(f'{m} MiB = {int(m) << 20}' for m in results)}"
    )


if __name__ == "__main__":
    main()
