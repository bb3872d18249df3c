"""One rank of a 2 x 2 job (nodes simulated with ACCEL_NODE_ID) whose VICTIMS (ranks,
comma-separated: one rank, or a whole node's) kill themselves in the middle of the job's
all-reduces; survivors write OUT/rank<N>.json with the error they raised and how long it
took.

    python two_level_fault.py OUT VICTIMS
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import accel.process_group  # noqa: F401  (registers "accel")

TIMEOUT = 20.0


def main() -> None:
    out, victims = Path(sys.argv[1]), {int(rank) for rank in sys.argv[2].split(",")}
    dist.init_process_group("accel", timeout=timedelta(seconds=TIMEOUT))
    rank = dist.get_rank()
    tensor = torch.ones(1 << 20)
    dist.all_reduce(tensor)  # set up both levels before anyone dies
    start = time.monotonic()
    error = None
    try:
        for step in range(50):
            if step == 3 and rank in victims:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.all_reduce(tensor)
    except RuntimeError as raised:
        error = str(raised)
    record = {"rank": rank, "error": error, "seconds": time.monotonic() - start}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    os._exit(0)  # the group cannot be shut down cleanly with a dead peer


if __name__ == "__main__":
    main()
