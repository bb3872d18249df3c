"""Train a small model with DeepSpeed ZeRO stages 0-3 and print the losses as JSON.

Run it once per world size, on native DeepSpeed to make the reference and with accel's
integration to compare (tests/integrations/deepspeed/test_training.py). Every configuration runs in the
same processes, one engine after another, so a world size costs one launch.

Reference (native DeepSpeed 0.19.8, its JIT builds in TORCH_EXTENSIONS_DIR):
    DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=/tmp/tex python tests/integrations/deepspeed/scripts/zero_parity.py \
        --world 1 --out /tmp/ref1.json
    DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=/tmp/tex torchrun --nproc-per-node 2 \
        tests/integrations/deepspeed/scripts/zero_parity.py --world 2 --out /tmp/ref2.json
then merge the two files into tests/integrations/deepspeed/scripts/zero_reference.json under keys "1" and "2"
(``python tests/integrations/deepspeed/scripts/zero_parity.py --merge /tmp/ref1.json /tmp/ref2.json``).

With ``--backend accel`` the result also records how many of ZeRO-1/2's flat gradient
buckets were made in the group's pool (``zero_pool``: accel.integrations.deepspeed.zero's
counts) and how many all-reduces went straight between pooled tensors
(``pooled_all_reduces``, on one node). ``--backend accel --configs zero2-fp32,zero2-bf16``
trains only those configurations and records which collectives took accel.comm's two
levels (test_training.py runs it on two simulated nodes against the same launch with
``--backend gloo``, recorded in zero2_two_nodes_gloo_reference.json by:
    for node in 0 1; do ACCEL_DEEPSPEED=1 ACCEL_NODE_ID=n$node PYTHONPATH=. accel run \
        --nnodes=2 --node-rank=$node --nproc-per-node=2 --master-addr=127.0.0.1 \
        --master-port=29555 tests/integrations/deepspeed/scripts/zero_parity.py --world 4 \
        --backend gloo --configs zero2-fp32,zero2-bf16 \
        --out tests/integrations/deepspeed/scripts/zero2_two_nodes_gloo_reference.json & done; wait
).

``--configs zero2-bf16-states-offload,zero3-bf16-states-offload`` trains the configurations
that only run when named: bf16 master weights and bf16 optimizer states on the CPU
(DeepSpeedCPUAdam with fp32_optimizer_states=False). Their reference, one rank, is
zero_bf16_states_reference.json:
    DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=/tmp/tex python tests/integrations/deepspeed/scripts/zero_parity.py \
        --world 1 --configs zero2-bf16-states-offload,zero3-bf16-states-offload \
        --out tests/integrations/deepspeed/scripts/zero_bf16_states_reference.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any

STEPS = 6
CONFIGS = [
    (stage, dtype, offload)
    for stage in (0, 1, 2, 3)
    for dtype in ("fp32", "bf16")
    for offload in (False, True)
    if not (stage == 0 and offload)  # offloading the optimizer needs ZeRO >= 1
]
# Trained only when --configs names them (see above).
NAMED_CONFIGS = [(2, "bf16-states", True), (3, "bf16-states", True)]


def config_key(stage: int, dtype: str, offload: bool) -> str:
    return f"zero{stage}-{dtype}" + ("-offload" if offload else "")


def train(stage: int, dtype: str, offload: bool) -> list[float]:
    import deepspeed
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    )
    zero: dict[str, object] = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "weight_decay": 0.01}},
        "zero_optimization": zero,
        "bf16": {"enabled": dtype != "fp32"},
        "steps_per_print": 1 << 30,
    }
    if dtype == "bf16-states":
        config["bf16"] = {
            "enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True,
        }  # fmt: skip
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    losses = run_steps(engine, STEPS, bf16=dtype != "fp32")
    engine.destroy()
    return losses


def run_steps(engine: Any, steps: int, bf16: bool) -> list[float]:
    """``steps`` training steps on each rank's own random batches (4 x 32 -> 8); the mean
    loss over the ranks after each."""
    import torch

    data = torch.Generator().manual_seed(100 + torch.distributed.get_rank())
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 32, generator=data)
        y = torch.randn(4, 8, generator=data)
        if bf16:
            x = x.to(torch.bfloat16)
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        total = loss.detach().float().clone()
        torch.distributed.all_reduce(total)
        losses.append(total.item() / torch.distributed.get_world_size())
    return losses


def pool_counts() -> dict[str, Any]:
    """The flat buckets made in the pool, and the pooled all-reduces of this rank's groups
    on one node (read locally: no collective)."""
    import dataclasses

    from accel.comm import _segment
    from accel.integrations.deepspeed import zero

    pooled = sum(
        shm.communicator.pooled_calls["all_reduce"]
        for shm in _segment._groups.values()
        if shm is not None
    )
    return {"zero_pool": dataclasses.asdict(zero.COUNTS), "pooled_all_reduces": pooled}


def ask_for_cpu_info_once() -> None:
    """Make py-cpuinfo answer from its first answer: DeepSpeedCPUAdam asks it for the CPU's
    vendor on every construction, and each ask starts a Python process (~1 s of CPU here),
    once per offloaded configuration. The vendor (the only field DeepSpeed reads there)
    cannot change within a process."""
    import functools

    import cpuinfo

    cpuinfo.get_cpu_info = functools.cache(cpuinfo.get_cpu_info)


def main() -> None:
    ask_for_cpu_info_once()
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--merge", nargs=2)
    parser.add_argument("--backend", default="gloo", help="torch.distributed backend")
    parser.add_argument("--configs", help="comma-separated keys (zero2-fp32,...); default all")
    args = parser.parse_args()
    if args.merge:
        runs = [json.loads(pathlib.Path(p).read_text()) for p in args.merge]
        merged = {str(run["world"]): run["losses"] for run in runs}
        json.dump(merged, sys.stdout, indent=1, sort_keys=True)
        return
    if args.world == 1:  # no launcher: one rank of its own
        for name, value in (
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29517"),
        ):
            os.environ.setdefault(name, value)
    import deepspeed
    import torch

    import accel.process_group  # noqa: F401  (registers "accel", for --backend accel)

    two_level = None
    if args.backend == "accel":  # which collectives took two levels (simulated nodes)
        from tests.support.two_level import count_two_level_calls

        two_level = count_two_level_calls()
    deepspeed.init_distributed(dist_backend=args.backend)
    chosen = args.configs.split(",") if args.configs else [config_key(*c) for c in CONFIGS]
    losses = {
        config_key(*c): train(*c) for c in CONFIGS + NAMED_CONFIGS if config_key(*c) in chosen
    }
    if torch.distributed.get_rank() == 0:
        result: dict[str, Any] = {"world": args.world, "losses": losses}
        if two_level is not None:
            result["two_level"] = dict(two_level)
        if args.backend == "accel":
            result.update(pool_counts())
        text = json.dumps(result, indent=1)
        if args.out:
            with open(args.out, "w") as out:
                out.write(text)
        else:
            print(text)
    torch.distributed.destroy_process_group()  # gloo's threads stop before the interpreter does


if __name__ == "__main__":
    main()
    # A destroyed process group can still be held in a reference cycle when main() returns
    # (as in tests/comm/scripts/process_group_check.py): collect it now, not at interpreter
    # teardown, where its gloo threads dropping tensors can abort the process (torch's exit
    # race: exit_abort_repro.py here; seen once in a CI run of 4 ranks on 2 cores).
    import gc

    gc.collect()
