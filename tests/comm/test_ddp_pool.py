"""DDP's gradient buckets moved into the "accel" group's pool in place
(:mod:`accel.comm._promote`): gloo's results bit for bit, and nothing moved that anyone
else can still reach."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support import ROOT
from tests.support.shm import left_behind, shm_names

SCRIPT = ROOT / "tests" / "comm" / "scripts" / "ddp_pool_check.py"


@pytest.mark.slow
def test_ddp_buckets_move_into_the_pool_and_train_as_gloo_does() -> None:
    shm_before = shm_names()
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(SCRIPT)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT, capture_output=True, text=True,
        timeout=400, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    # Every case, every drawn layout: gloo's losses and parameters, bit for bit.
    assert all(facts["same_as_gloo"].values()), facts["same_as_gloo"]
    moved = facts["moved"]
    # Buckets moved, with or without bucket views, from their second sight on...
    assert moved["default"] > 0, moved
    assert moved["bucket_view"] == moved["default"], moved
    assert all(
        moved[case] > 0 for case in ("unused", "static_graph", "no_sync", "bf16", "accel_adam")
    )
    # ...except the one a numpy array or a DLPack export of a parameter's .grad still
    # reads: it stays, and they keep seeing the gradients DDP writes there (checked after
    # the accel run and after the gloo run). So does the bucket of a parameter whose .grad
    # a DLPack array of a view holds while the parameter goes unused and is used again.
    assert moved["numpy_holder"] == moved["bucket_view"] - 1
    assert moved["dlpack_holder"] == moved["bucket_view"] - 1
    assert moved["base_dlpack_holder"] == moved["bucket_view"] - 1
    assert facts["holders_follow"] == {
        case: [True, True]
        for case in ("numpy_holder", "dlpack_holder", "base_dlpack_holder", "unused_holder")
    }
    # A thread reading the .grads while buckets move: no crash, gloo's results.
    assert moved["thread_reader"] == 2
    # A TorchScript hook's own buffer, all-reduced from backward, is no bucket: only the
    # model's bucket moves, and a DLPack view of the buffer keeps seeing it.
    assert moved["scripted_hook"] == 1
    assert facts["hook_buffer_stays"] is True
    # Moved out of the pool by share_memory_(): no longer counted as in it.
    assert facts["shared_leave_the_pool"] == [True, True, True]
    # A DDP made with init_sync=False is known to the group all the same.
    assert moved["init_sync_off"] == moved["bucket_view"]
    # Not DDP's reducer (a comm hook, direct calls), opted out, or no room: nothing moves.
    assert moved["comm_hook"] == 0
    assert facts["direct_call_stays"] is True
    assert moved["opted_out"] == 0
    assert moved["small_pool"] == 0
    assert facts["small_pool_said"] is True
    # The blocks go back to the pool when DDP drops its buckets.
    assert facts["pool_taken"] > 0
    assert facts["pool_back"] == 0
    # `accel report` collected inside the job names the buckets in the pool, per group.
    assert re.search(
        r"group '[^']+': [1-9][0-9]* DDP bucket\(s\) in this rank's pool", facts["report"]
    )
    assert not left_behind(shm_before)
