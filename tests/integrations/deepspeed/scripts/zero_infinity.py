"""ZeRO-3 with parameters and optimizer states offloaded to NVMe (ZeRO-Infinity) against
the same run offloaded to CPU memory: prints both loss curves as JSON.

Through accel's integration the NVMe swapping runs on accel.io, with no libaio and no
compiler (native DeepSpeed cannot build its aio op on such a machine). Used by
tests/integrations/deepspeed/test_training.py; by hand:
    ACCEL_DEEPSPEED=1 python tests/integrations/deepspeed/scripts/zero_infinity.py --swap DIR
    ACCEL_DEEPSPEED=1 torchrun --nproc-per-node 2 \\
        tests/integrations/deepspeed/scripts/zero_infinity.py --swap DIR
"""

from __future__ import annotations

import argparse
import json
import os

from zero_parity import ask_for_cpu_info_once, run_steps  # this script's directory is on sys.path

STEPS = 5


def train(device: str, swap: str) -> tuple[list[float], int]:
    import deepspeed
    import torch

    torch.manual_seed(0)
    # Partitions above DeepSpeed's smallest swapped tensor (1 MB) on 2 ranks: smaller ones
    # stay in memory.
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 768),
        torch.nn.GELU(),
        torch.nn.Linear(768, 1024),
        torch.nn.GELU(),
        torch.nn.Linear(1024, 8),
    )
    offload: dict[str, object] = {"device": device, "pin_memory": False}
    if device == "nvme":
        offload["nvme_path"] = swap
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {
            "stage": 3,
            "stage3_param_persistence_threshold": 0,  # every parameter is swapped
            "offload_param": {
                **offload,
                "buffer_count": 5,
                "buffer_size": 1 << 20,
                "max_in_cpu": 0,
            },
            "offload_optimizer": dict(offload),
        },
        "aio": {
            "block_size": 1 << 20,
            "queue_depth": 8,
            "single_submit": False,
            "overlap_events": True,
            "thread_count": 1,
        },
        # bf16: DeepSpeed 0.19.8 swaps parameters in bf16 whatever the model's dtype (its
        # swap directory is "bfloat16params"), which an fp32 model then fails to multiply.
        "bf16": {"enabled": True},
        "steps_per_print": 1 << 30,
    }
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    losses = run_steps(engine, STEPS, bf16=True)
    swap_files = sum(len(files) for _, _, files in os.walk(swap))  # before destroy() cleans up
    engine.destroy()
    return losses, swap_files


def main() -> None:
    ask_for_cpu_info_once()
    parser = argparse.ArgumentParser()
    parser.add_argument("--swap", required=True, help="directory for the NVMe swap files")
    args = parser.parse_args()
    if "RANK" not in os.environ:  # no launcher: one rank of its own
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29519")
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    cpu, _ = train("cpu", args.swap)
    nvme, swap_files = train("nvme", args.swap)
    if torch.distributed.get_rank() == 0:
        world = torch.distributed.get_world_size()
        print(json.dumps({"cpu": cpu, "nvme": nvme, "world": world, "swap_files": swap_files}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
