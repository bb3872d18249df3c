"""accel.io against fio (and DeepSpeed's aio when it loads) on the same file, interleaved.

    python benchmarks/io.py --dir /path/on/the/disk [--sizes 64,256,1024] [--rounds 3]

For each tensor size (MiB), block size and queue depth: write then read a file with
accel.io (O_DIRECT, aligned buffer: the page cache is bypassed both ways, so reads come
from the disk), then fio with the same file, size, block size and depth
(``--ioengine=libaio --direct=1``), alternating the two ``--rounds`` times; best of the
rounds in GB/s (1e9 bytes/s). The file is laid out at full size before any timing, as
fio does on its own, and accel's threads are started before its timing. DeepSpeed's aio
joins when ``deepspeed`` is installed and its ``AsyncIOBuilder`` is compatible (it needs
libaio and a JIT build); it is skipped otherwise. "kernel AIO" is Linux AIO, fio's engine,
driven on the tensor's own memory (``_kernel_aio.py``): fio rewrites a few MiB of its own
buffers, which stay in the CPU caches, so it is the like-for-like baseline for a tensor.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import time

import _kernel_aio  # beside this script: on sys.path when it runs
import torch

from accel.io import AsyncIO, aligned_empty

MiB = 1 << 20


def _accel(path: pathlib.Path, buffer: torch.Tensor, block: int, depth: int) -> tuple[float, float]:
    with AsyncIO(block_size=block, queue_depth=depth, direct=True) as aio:
        aio.read(buffer[:4096], path).result()  # start the threads outside the timing
        start = time.perf_counter()
        aio.write(buffer, path).result()
        write = time.perf_counter() - start
        start = time.perf_counter()
        aio.read(buffer, path).result()
        read = time.perf_counter() - start
    nbytes = buffer.numel()
    return nbytes / write / 1e9, nbytes / read / 1e9


def _lay_out(path: pathlib.Path, nbytes: int) -> None:
    """Write the whole file once before timing anyone, as fio does ("laying out IO file"):
    the first write into fresh file blocks pays for allocating them (measured here at a
    third of the later speed), which is the file system's cost, not the I/O engine's."""
    chunk = bytes(MiB)
    with open(path, "wb") as out:
        for _ in range(nbytes // MiB):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())


def _fio(path: pathlib.Path, nbytes: int, block: int, depth: int) -> tuple[float, float]:
    rates = []
    for mode in ("write", "read"):
        out = subprocess.run(
            ["fio", "--name=bench", f"--filename={path}", f"--rw={mode}", f"--bs={block}",
             f"--iodepth={depth}", "--ioengine=libaio", "--direct=1", f"--size={nbytes}",
             "--output-format=json"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        job = json.loads(out)["jobs"][0][mode]
        rates.append(job["io_bytes"] / (job["runtime"] / 1e3) / 1e9)
    return rates[0], rates[1]


def _deepspeed_aio() -> object | None:
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder  # type: ignore[import-not-found]

        builder = AsyncIOBuilder()
        if not builder.is_compatible():
            return None
        return builder.load()
    except Exception:
        return None


def _ds(
    module: object, path: pathlib.Path, buffer: torch.Tensor, block: int, depth: int
) -> tuple[float, float]:
    handle = module.aio_handle(block, depth, False, False, 1)  # type: ignore[attr-defined]
    start = time.perf_counter()
    handle.sync_pwrite(buffer, str(path))
    write = time.perf_counter() - start
    start = time.perf_counter()
    handle.sync_pread(buffer, str(path))
    read = time.perf_counter() - start
    return buffer.numel() / write / 1e9, buffer.numel() / read / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path("."))
    parser.add_argument("--sizes", default="64,256,1024", help="tensor sizes in MiB")
    parser.add_argument("--blocks", default="1,8", help="block sizes in MiB")
    parser.add_argument("--depths", default="4,8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    have_fio = shutil.which("fio") is not None
    ds = _deepspeed_aio()
    path = args.dir / "accel-io-bench.bin"
    kernel = _kernel_aio.available()
    print("| size | block | depth | accel write | fio write | accel read | fio read |"
          + (" kernel AIO write | kernel AIO read |" if kernel else "")
          + (" DeepSpeed write | DeepSpeed read |" if ds else ""))  # fmt: skip
    print(
        "|---|---|---|---|---|---|---|"
        + ("---|---|" if kernel else "")
        + ("---|---|" if ds else "")
    )
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            buffer = aligned_empty(size * MiB, torch.uint8)
            buffer.random_(0, 255)
            _lay_out(path, size * MiB)
            for block in (int(b) * MiB for b in args.blocks.split(",")):
                for depth in (int(d) for d in args.depths.split(",")):
                    best: dict[str, tuple[float, float]] = {}
                    for _ in range(args.rounds):
                        runs = {"accel": _accel(path, buffer, block, depth)}
                        if have_fio:
                            runs["fio"] = _fio(path, size * MiB, block, depth)
                        if kernel:
                            runs["kernel"] = _kernel_aio.write_read(str(path), buffer, block, depth)
                        if ds:
                            runs["ds"] = _ds(ds, path, buffer, block, depth)
                        for name, (w, r) in runs.items():
                            old = best.get(name, (0.0, 0.0))
                            best[name] = (max(old[0], w), max(old[1], r))
                    fio = best.get("fio", (float("nan"), float("nan")))
                    ours = best["accel"]
                    row = (f"| {size} MiB | {block // MiB} MiB | {depth} | {ours[0]:.2f} | "
                           f"{fio[0]:.2f} | {ours[1]:.2f} | {fio[1]:.2f} |")  # fmt: skip
                    if kernel:
                        row += f" {best['kernel'][0]:.2f} | {best['kernel'][1]:.2f} |"
                    if ds:
                        row += f" {best['ds'][0]:.2f} | {best['ds'][1]:.2f} |"
                    print(row, flush=True)
    finally:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
