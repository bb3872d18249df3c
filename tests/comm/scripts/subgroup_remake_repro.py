"""Why a multi-node group's levels are not torch.distributed sub-groups.

torch names a ``new_group(..., use_local_synchronization=True)`` group after its ranks and
the calling rank's count of groups, so the same ranks in the same state give the same name
(and store prefix) every time, and members that belong to different numbers of groups
disagree on it. Destroying such a group
and making it again, while one member is still a little behind (here rank 1 sleeps 2 s
before its destroy), hangs the job in the new group's set-up or first collective: with
torch 2.13 on a 2-core machine, 7 of 10 runs hung until the 60 s timeout (exit 124), 1
failed (exit 1) and 2 finished (exit 0, about 10 s). Making it again with no destroy
between fails at once (the name is taken). accel's levels are therefore gloo contexts of
its own, named from a token each group's setup shares (accel/comm/_link.py), and freed
with their group.

    for i in $(seq 10); do timeout 60 torchrun --standalone --nproc-per-node 2 \
        tests/comm/scripts/subgroup_remake_repro.py >/dev/null 2>&1; echo "exit $?"; done

Not run by the test suite (it reproduces torch's behaviour, and hangs by design).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for round_ in range(3):
        group = dist.new_group([0, 1], backend="gloo", use_local_synchronization=True)
        tensor = torch.ones(3) * (round_ + 1)
        dist.all_reduce(tensor, group=group)
        print(rank, round_, tensor.tolist(), flush=True)
        if rank == 1:
            time.sleep(2)  # a member that is a little behind
        dist.destroy_process_group(group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
