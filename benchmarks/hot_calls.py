"""Per-step hot calls: accel's CPU backend against DeepSpeed's CPU accelerator.

    DS_ACCELERATOR=cpu python benchmarks/hot_calls.py [--repeat 7]

Frameworks call these once per tensor or per step. Each pair is timed in one process,
accel then DeepSpeed, best of ``--repeat`` rounds (robust on a noisy machine). Without
deepspeed installed only accel's column is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import timeit
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from accel import get_accelerator  # noqa: E402

Call = Callable[[], object]


def _best_ns(call: Call, repeat: int, number: int = 200_000) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    """Print a Markdown table: call, accel, DeepSpeed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    acc, tensor = get_accelerator(), torch.ones(1)
    ours: dict[str, Call] = {
        "get_accelerator()": get_accelerator,
        "current_device_name()": acc.current_device_name,
        "device_name()": acc.device_name,
        "device_name(0)": lambda: acc.device_name(0),
        "current_device()": acc.current_device,
        "is_synchronized_device()": acc.is_synchronized_device,
        "on_accelerator(t)": lambda: acc.on_accelerator(tensor),
    }
    theirs: dict[str, Call] = {}
    if importlib.util.find_spec("deepspeed") is not None:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        from deepspeed.accelerator import get_accelerator as ds_get  # type: ignore[import-not-found]

        ds = ds_get()
        theirs = {
            "get_accelerator()": ds_get,
            "current_device_name()": ds.current_device_name,
            "device_name()": ds.device_name,
            "device_name(0)": lambda: ds.device_name(0),
            "current_device()": ds.current_device,
            "is_synchronized_device()": ds.is_synchronized_device,
            "on_accelerator(t)": lambda: ds.on_accelerator(tensor),
        }
    print(f"accel backend: {type(acc).__name__}; DeepSpeed: {'yes' if theirs else 'not installed'}")
    print("| call | accel | DeepSpeed |\n|---|---|---|")
    for name, call in ours.items():
        peer = f"{_best_ns(theirs[name], args.repeat):.0f} ns" if name in theirs else "-"
        print(f"| `{name}` | {_best_ns(call, args.repeat):.0f} ns | {peer} |")


if __name__ == "__main__":
    main()
