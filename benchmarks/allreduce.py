"""All-reduce latency: accel's shared-memory path vs gloo (and DeepSpeed's when installed).

    accel run --standalone --nproc-per-node 2 benchmarks/allreduce.py [--iters 20]
    accel run --standalone --nproc-per-node 2 benchmarks/allreduce.py --compare-dtypes

Run under a launcher; rank 0 prints a markdown table. For each message size the methods
are timed in alternating rounds in the same job (the machine is noisy), and the median per
call is reported; a ratio column is the median of the per-round ratios. Bus bandwidth is
2 * (n - 1) / n * bytes / time, as nccl-tests define it. ``--compare-dtypes`` times accel's
all-reduce of the same number of bytes in fp32, bf16 and fp16 instead, interleaved, and
reports each 16-bit dtype's bus bandwidth over fp32's. The header names the kernels'
instruction-set level (``ACCEL_CPU_ISA`` caps it; accel/ops/isa.py).

The bound: every rank also times ``copy_`` of the same bytes into a buffer of its own, in
the same rounds, while the other ranks do the same (the ranks leave each collective
together). An all-reduce moves at least the bytes of such a copy, so "copy_ / accel"
(copy time over all-reduce time, median of the rounds' ratios) is the fraction of the
copy rate the all-reduce reaches; 1.0 would be an all-reduce as fast as a copy.

"accel pooled" is ``all_reduce_`` on a tensor made by ``accel.comm.shared_empty`` (in the
segment's pool on every rank): the sums go straight between the ranks' tensors. Calls on
the same tensor, back to back, find each rank's share of every tensor in that rank's cache
(it wrote it last), which no training step does: ``--fresh`` writes every rank's tensor
(``copy_`` from another buffer) before each call, as a backward pass writes gradients, and
reports each method's time less the time of that write alone (timed in the same rounds).
"copy_ / accel pooled" is the copy-rate fraction of the pooled all-reduce.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _collective_timing import (  # noqa: E402  # beside this script
    after_writing,
    interleaved,
    label,
    microseconds,
)

from accel.comm import all_reduce_, shared_empty, uses_shared_memory  # noqa: E402
from accel.ops import isa  # noqa: E402

SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _deepspeed() -> Callable[[torch.Tensor], object] | None:
    if importlib.util.find_spec("deepspeed") is None:
        return None
    from deepspeed.ops.op_builder import ShareMemCommBuilder  # type: ignore[import-not-found]

    # DeepSpeed's shm all-reduce segfaults unless LOCAL_SIZE says how many local ranks
    # there are (torchrun sets LOCAL_WORLD_SIZE, not LOCAL_SIZE).
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    module = ShareMemCommBuilder().load()  # a JIT build on first use (~45 s here)
    module.initialize(dist.get_world_size(), dist.get_rank())
    if hasattr(module, "inference_all_reduce"):  # DeepSpeed < 0.16: a module function
        return lambda t: module.inference_all_reduce(t)
    # DeepSpeed 0.16+ registers a torch op instead (what its comm layer calls).
    return lambda t: torch.ops.deepspeed.inference_all_reduce_(t)


def _native_call() -> Callable[[torch.Tensor], object]:
    """The segment's native call with nothing around it: what ``all_reduce_`` costs beyond
    it is its Python entry (checks, group lookup, dispatch). Uses accel.comm's internals."""
    from accel.comm import _segment

    shm = _segment.shm_group(None, "benchmarks/allreduce.py")
    assert shm is not None
    native, codes = shm.communicator, shm.codes

    def call(tensor: torch.Tensor) -> object:
        return native.all_reduce(
            tensor.data_ptr(), tensor.numel(), codes[tensor.dtype], True, shm.timeout
        )

    return call


def compare_dtypes(args: argparse.Namespace) -> None:
    """accel's all-reduce of the same bytes in each dtype, interleaved; rank 0 prints."""
    world = dist.get_world_size()
    rows = []
    for size in SIZES:
        tensors = {name: torch.ones(size // d.itemsize, dtype=d) for name, d in DTYPES.items()}
        calls = {name: functools.partial(all_reduce_, t) for name, t in tensors.items()}
        rows.append((size, *interleaved(calls, size, args, "float32")))
    if dist.get_rank() == 0:
        print(
            f"{world} ranks, torch {torch.__version__}, kernels: {isa.describe()}, "
            f"median of {args.rounds} rounds (ratios: median of the rounds' ratios)"
        )
        print("| size | fp32 (us) | bf16 (us) | fp16 (us) | fp32 bus GB/s | "
              "bf16 / fp32 bus bandwidth | fp16 / fp32 bus bandwidth |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for size, medians, ratios in rows:
            size_label = label(size)
            times = " | ".join(microseconds(medians[name]) for name in DTYPES)
            bus = 2 * (world - 1) / world * size / medians["float32"] / 1e9
            # Same bytes, so bandwidth ratio = fp32 time / 16-bit time.
            print(f"| {size_label} | {times} | {bus:.1f} | {1 / ratios['bfloat16']:.2f}x | "
                  f"{1 / ratios['float16']:.2f}x |")  # fmt: skip


def main() -> None:
    """Time every size and print the table on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20, help="calls per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float32", help="element type (default fp32)"
    )
    parser.add_argument(
        "--skip-gloo", action="store_true", help="leave gloo out (it dominates the run time)"
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="also time the native call alone (the floor under all_reduce_'s Python entry)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="write each rank's tensor before every call, and report times less that write",
    )
    parser.add_argument(
        "--compare-dtypes",
        action="store_true",
        help="time accel's all-reduce in fp32, bf16 and fp16 (same bytes) instead of the peers",
    )
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    assert uses_shared_memory(), "the shared-memory path is not available in this job"
    if args.compare_dtypes:
        compare_dtypes(args)
        dist.destroy_process_group()
        return
    methods: dict[str, Callable[[torch.Tensor], object]] = {"accel shm": all_reduce_}
    if args.native:
        methods["accel native call"] = _native_call()
    if not args.skip_gloo:
        methods["gloo"] = dist.all_reduce
    deepspeed = _deepspeed()
    if deepspeed is not None:
        methods["DeepSpeed shm"] = deepspeed
    rows = []
    for size in SIZES:
        tensor = torch.ones(size // dtype.itemsize, dtype=dtype)
        pooled = shared_empty(tensor.numel(), dtype=dtype).fill_(1)
        calls: dict[str, Callable[[], object]] = {
            name: functools.partial(method, tensor) for name, method in methods.items()
        }
        calls["accel pooled"] = functools.partial(all_reduce_, pooled)
        written = list(calls) if args.fresh else []
        if args.fresh:
            source = torch.ones_like(tensor)
            targets = {name: tensor for name in calls} | {"accel pooled": pooled}
            calls = {
                name: after_writing(targets[name], source, call) for name, call in calls.items()
            }
            calls["write"] = functools.partial(tensor.copy_, source)
        # The bound: the same bytes copied by every rank at once (see the module docstring).
        calls["copy_"] = functools.partial(torch.empty_like(tensor).copy_, tensor)
        pair = ("copy_", "accel pooled")
        rows.append((size, *interleaved(calls, size, args, "accel shm", written, pair)))
    if dist.get_rank() == 0:
        print(
            f"{world} ranks, torch {torch.__version__}, {args.dtype}, kernels: {isa.describe()}, "
            f"median of {args.rounds} rounds (ratios: median of the rounds' ratios)"
            + (", each call after writing its tensor, less that write" if args.fresh else "")
        )
        names = [*methods, "accel pooled", "copy_"]
        peers = [n for n in names if n != "accel shm"]
        columns = " | ".join(f"{n} (us)" for n in names)
        ratios = " | ".join(f"{n} / accel" for n in peers)
        print(f"| size | {columns} | {ratios} | copy_ / accel pooled | accel bus GB/s |")
        print("|---|" + "---|" * (len(names) + len(peers) + 2))
        for size, medians, paired in rows:
            size_label = label(size)
            times = " | ".join(microseconds(medians[n]) for n in names)
            speedups = " | ".join(f"{paired[n]:.2f}x" for n in peers)
            pooled_bound = paired["copy_ / accel pooled"]
            bus = 2 * (world - 1) / world * size / medians["accel shm"] / 1e9
            print(f"| {size_label} | {times} | {speedups} | {pooled_bound:.2f}x | {bus:.1f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
