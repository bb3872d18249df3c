"""What accel costs on top of torch: selection, method calls, capability checks, import.

    python benchmarks/overhead.py [--repeat 7] [--imports 15]

Each pair (accel vs the direct call) is timed interleaved in one process and the table
reports the best of ``--repeat`` rounds, which is robust to a noisy shared machine.
Targets: isinstance <= 200 ns hit and miss, get_accelerator() <= 40 ns once selected,
``import accel`` <= 50 ms on top of ``import torch``, and ``import accel`` with a first
``get_accelerator()`` (entry points, backend classes, probes) <= 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import psutil  # noqa: E402
import torch  # noqa: E402
from typing_extensions import Protocol, runtime_checkable  # noqa: E402

from accel import get_accelerator  # noqa: E402
from accel.protocols import Accelerator, GraphAPI, ProfilerAPI  # noqa: E402


@runtime_checkable
class PlainGraphAPI(Protocol):
    """GraphAPI as a plain runtime protocol (no memo), for comparison."""

    def create_graph(self) -> object: ...
    def capture_to_graph(self, graph: object) -> object: ...
    def replay_graph(self, graph: object) -> None: ...


@runtime_checkable
class PlainProfilerAPI(Protocol):
    """ProfilerAPI as a plain runtime protocol (no memo), for comparison."""

    def range_push(self, msg: str) -> None: ...
    def range_pop(self) -> None: ...


def _best_ns(func: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e9


def _pairs(acc: Accelerator) -> list[tuple[str, Callable[[], object], str, Callable[[], object]]]:
    process = psutil.Process()
    return [
        ("get_accelerator()", get_accelerator, "(a global read: lambda: acc)", lambda: acc),
        (
            "isinstance(acc, GraphAPI)  [miss]",
            lambda: isinstance(acc, GraphAPI),
            "plain runtime protocol [miss]",
            lambda: isinstance(acc, PlainGraphAPI),
        ),
        (
            "isinstance(acc, ProfilerAPI) [hit]",
            lambda: isinstance(acc, ProfilerAPI),
            "plain runtime protocol [hit]",
            lambda: isinstance(acc, PlainProfilerAPI),
        ),
        (
            "get_accelerator().manual_seed(1)",
            lambda: get_accelerator().manual_seed(1),
            "torch.manual_seed(1)",
            lambda: torch.manual_seed(1),
        ),
        (
            "get_accelerator().current_device_name()",
            lambda: get_accelerator().current_device_name(),
            "torch.cpu.current_device()",
            torch.cpu.current_device,
        ),
        (
            "get_accelerator().device_count()",
            lambda: get_accelerator().device_count(),
            "torch.cpu.device_count()",
            torch.cpu.device_count,
        ),
        (
            "get_accelerator().memory_allocated()",
            lambda: get_accelerator().memory_allocated(),
            "psutil.Process().memory_info().rss",
            lambda: process.memory_info().rss,
        ),
    ]


def _import_overhead_ms(runs: int, then: str = "") -> tuple[float, float]:
    """Median and best of ``import accel`` (and ``then``) after ``import torch``, in ms."""
    probe = (
        "import time, warnings; warnings.filterwarnings('ignore'); import torch\n"
        f"t = time.perf_counter(); import accel\n{then}\nprint(time.perf_counter() - t)"
    )
    samples = [
        float(
            subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, check=True
            ).stdout
        )
        * 1e3
        for _ in range(runs)
    ]
    return statistics.median(samples), min(samples)


def main() -> None:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds per measurement")
    parser.add_argument("--imports", type=int, default=15, help="fresh interpreters to time")
    args = parser.parse_args()

    acc = get_accelerator()
    print(
        f"backend: {type(acc).__name__}  torch {torch.__version__}  Python {sys.version.split()[0]}"
    )
    print(f"{'accel':<42} {'ns':>9}   {'direct':<36} {'ns':>9}  ratio")
    for name, ours, peer_name, peer in _pairs(acc):
        number = 20_000 if "memory" in name or "seed" in name or "count" in name else 200_000
        ours_ns = peer_ns = float("inf")
        for _ in range(args.repeat):  # interleave so both see the same machine state
            ours_ns = min(ours_ns, _best_ns(ours, number, 1))
            peer_ns = min(peer_ns, _best_ns(peer, number, 1))
        ratio = ours_ns / peer_ns
        print(f"{name:<42} {ours_ns:>9.1f}   {peer_name:<36} {peer_ns:>9.1f}  {ratio:5.2f}x")
    for what, then in (("", ""), ("; get_accelerator()", "accel.get_accelerator()")):
        median_ms, best_ms = _import_overhead_ms(args.imports, then)
        print(
            f"import accel{what} after import torch: median {median_ms:.1f} ms, best "
            f"{best_ms:.1f} ms over {args.imports} fresh interpreters"
        )


if __name__ == "__main__":
    main()
