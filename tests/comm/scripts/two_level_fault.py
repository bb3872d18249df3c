"""One rank of a 2 x 2 job (nodes simulated with ACCEL_NODE_ID) whose VICTIMS (ranks,
comma-separated: one rank, or a whole node's) kill themselves in the middle of the job's
all-reduces; survivors write OUT/rank<N>.json with the error they raised and how long it
took, and stay alive until every survivor has written its record (a survivor that exited
at once would close its connections and so wake a peer that would otherwise wait on it
for the group's whole timeout).

    python two_level_fault.py OUT VICTIMS [silent | mismatch]

With ``silent`` the victims stay alive but stop calling (they sleep until the survivors
are done), and the survivors' all-reduces are ``accel.comm.all_reduce_`` with a
``timeout`` of CALL_TIMEOUT seconds: every survivor must raise about then, not at the
group's timeout, whichever level it waits on. With ``mismatch`` the victims pass one
element more: they raise at once, and every rank writes its record.
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
from accel import comm

TIMEOUT = 60.0
CALL_TIMEOUT = 3.0


def main() -> None:
    out, victims = Path(sys.argv[1]), {int(rank) for rank in sys.argv[2].split(",")}
    how = sys.argv[3] if sys.argv[3:] else "killed"
    silent, mismatch = how == "silent", how == "mismatch"
    dist.init_process_group("accel", timeout=timedelta(seconds=TIMEOUT))
    rank = dist.get_rank()
    survivors = set(range(dist.get_world_size())) - (set() if mismatch else victims)
    tensor = torch.ones(1 << 20)
    dist.all_reduce(tensor)  # set up both levels before anyone dies
    start = time.monotonic()
    error = None
    try:
        for step in range(50):
            if step == 3 and rank in victims and mismatch:
                tensor = torch.ones(tensor.numel() + 1)
            elif step == 3 and rank in victims:
                if not silent:
                    os.kill(os.getpid(), signal.SIGKILL)
                _wait_for_records(out, survivors)
                os._exit(0)
            if silent:
                comm.all_reduce_(tensor, timeout=CALL_TIMEOUT)
            else:
                dist.all_reduce(tensor)
    except (RuntimeError, ValueError) as raised:  # a mismatch is a ValueError
        error = str(raised)
    record = {"rank": rank, "error": error, "seconds": time.monotonic() - start}
    partial = out / f"rank{rank}.json.partial"
    partial.write_text(json.dumps(record))
    partial.rename(out / f"rank{rank}.json")
    _wait_for_records(out, survivors)
    os._exit(0)  # the group cannot be shut down cleanly with a dead peer


def _wait_for_records(out: Path, survivors: set[int]) -> None:
    deadline = time.monotonic() + 2 * TIMEOUT
    while time.monotonic() < deadline and not all(
        (out / f"rank{r}.json").exists() for r in survivors
    ):
        time.sleep(0.05)


if __name__ == "__main__":
    main()
