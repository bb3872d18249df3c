"""Timing for the collective benchmarks (allreduce.py, reduce_scatter.py): imported from
beside them (a launcher puts the script's folder on sys.path)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Collection, Mapping

import torch
import torch.distributed as dist


def seconds_per_call(call: Callable[[], object], iters: int) -> float:
    """Mean seconds of ``iters`` back-to-back calls, started together on every rank."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters


def after_writing(
    tensor: torch.Tensor, source: torch.Tensor, call: Callable[[], object]
) -> Callable[[], object]:
    """``call`` preceded by writing ``tensor`` from ``source``, as a backward pass or
    FSDP2's copy-in writes it before the collective."""

    def written() -> object:
        tensor.copy_(source)
        return call()

    return written


def microseconds(seconds: float) -> str:
    """One decimal where whole microseconds would hide the difference (small messages)."""
    micro = seconds * 1e6
    return f"{micro:.1f}" if micro < 100 else f"{micro:.0f}"


def interleaved(
    calls: Mapping[str, Callable[[], object]],
    size: int,
    args: argparse.Namespace,
    base: str,
    after_write: Collection[str] = (),
    pair: tuple[str, str] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Each call's median seconds per call, and its time over ``base``'s as the median of
    the rounds' ratios: the calls take turns within each round (one warm-up each), and
    the machine flips between quiet and busy spells lasting seconds, which shift a whole
    round alike. The calls named in ``after_write`` are timed less the ``"write"`` call's
    time of the same round. ``pair`` (a, b) adds the ratio "a / b" the same way."""
    iters = max(3, args.iters * (1 << 20) // max(size, 1 << 20))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(args.rounds):
        for name, call in calls.items():
            samples[name].append(seconds_per_call(call, iters))
    if "write" in samples:  # --fresh: these calls wrote their tensor first; take that away
        written = samples.pop("write")
        for name in after_write:
            samples[name] = [max(t - w, 1e-9) for t, w in zip(samples[name], written, strict=True)]
    medians = {name: statistics.median(times) for name, times in samples.items()}
    ratios = {
        name: statistics.median(a / b for a, b in zip(times, samples[base], strict=True))
        for name, times in samples.items()
    }
    if pair is not None:
        a, b = pair
        ratios[f"{a} / {b}"] = statistics.median(
            x / y for x, y in zip(samples[a], samples[b], strict=True)
        )
    return medians, ratios


def label(size: int) -> str:
    """A byte count as KiB or MiB."""
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
