"""`accel port` on large generated files: time and peak memory against file size.

Two shapes of generated module, each at several sizes, each ported in a fresh interpreter
(so peak RSS is the port's own):

- ``mixed``: realistic code, one function in ten uses CUDA (device strings, .cuda(),
  torch.cuda calls); the other nine are plain model code that mentions no device;
- ``dense``: every function uses CUDA in every line (the worst case: everything must go
  through libcst).

Usage: python benchmarks/port_scale.py [--sizes 0.5 1 2 5] [--shapes mixed dense]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CUDA_FUNCTION = """
def step_{i}(model, batch, rank):
    torch.cuda.set_device(rank)
    x = batch.cuda(non_blocking=True)
    noise = torch.randn(4, device="cuda:0")
    if x.is_cuda:
        torch.cuda.synchronize()
    out = model(x).to(torch.cuda.current_device())
    print("step", {i}, torch.cuda.memory_allocated())
    return out + noise.pin_memory()  # keep comment {i}

"""
PLAIN_FUNCTION = '''
def block_{i}(x, weight, bias):
    """Layer {i}: an affine map, a norm and a residual."""
    y = torch.nn.functional.linear(x, weight, bias)
    y = torch.nn.functional.layer_norm(y, y.shape[-1:])
    scale = {i} % 7 + 1
    for _ in range(2):
        y = y * scale + x
    return torch.relu(y)  # plain code {i}

'''

PORT = """
import json, resource, sys, time
from accel.port.rewrite import port_source
source = open(sys.argv[1], encoding="utf-8").read()
start = time.perf_counter()
result = port_source(source)
seconds = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kib": peak_kib, "findings": len(result.findings)}))
"""

BASELINE = """
import json, resource, sys
from accel.port.rewrite import port_source
port_source("import torch\\nx = torch.cuda.current_device()\\n")
print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def generate(shape: str, megabytes: float) -> str:
    """A module of about ``megabytes`` MB in the given shape."""
    target = int(megabytes * 1_000_000)
    parts = ["import torch\n"]
    size, i = 0, 0
    while size < target:
        cuda = shape == "dense" or i % 10 == 0
        part = (CUDA_FUNCTION if cuda else PLAIN_FUNCTION).format(i=i)
        parts.append(part)
        size += len(part)
        i += 1
    return "".join(parts)


def _child(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout
    answer: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return answer


def main() -> None:
    """Print one row per shape and size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--shapes", nargs="+", default=["mixed", "dense"])
    args = parser.parse_args()
    baseline = _child(BASELINE)["peak_kib"] * 1024
    print(f"interpreter with torch-free accel.port loaded: {baseline / 2**20:.0f} MiB peak RSS")
    print("shape  size_MB  seconds  MB/s   peak_MiB  (peak - baseline) / size  findings")
    with tempfile.TemporaryDirectory() as directory:
        for shape in args.shapes:
            for megabytes in args.sizes:
                path = Path(directory, f"{shape}_{megabytes}.py")
                text = generate(shape, megabytes)
                path.write_text(text, encoding="utf-8")
                row = _child(PORT, str(path))
                size = len(text.encode())
                peak = row["peak_kib"] * 1024
                print(
                    f"{shape:6} {size / 1e6:7.2f}  {row['seconds']:7.1f}  "
                    f"{size / 1e6 / row['seconds']:5.2f}  {peak / 2**20:8.0f}  "
                    f"{(peak - baseline) / size:8.1f}x  {int(row['findings'])}"
                )


if __name__ == "__main__":
    main()
