"""A small transformer trained with FSDP2 (`fully_shard`) and saved as a full checkpoint,
written the way FSDP2 examples set up a GPU job: `torch.device(f"cuda:{rank}")`,
`torch.cuda.set_device(device)`, `init_process_group("nccl", device_id=device)`, a model
built on the meta device and materialised with `to_empty(device="cuda")`, bf16 autocast
on `device_type="cuda"`, and a full state dict gathered with DTensor's `full_tensor()`.
Written for accel's port tests (not copied from anywhere): `accel port` must turn it into
a script that also runs on the CPU as FSDP ranks under `accel run`.

Usage: torchrun --nproc-per-node N fsdp2_checkpoint.py STEPS CHECKPOINT OUT.json
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

VOCAB, WIDTH, SEQ = 64, 32, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, layers: int = 3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)

    def reset_parameters(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
                module.reset_parameters()


def main(steps: int, checkpoint: str, out: str) -> None:
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl", device_id=device)
    name = torch.cuda.get_device_properties(device).name

    torch.manual_seed(0)  # the same model everywhere; FSDP shards it
    with torch.device("meta"):
        model = TinyLM()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    model.to_empty(device="cuda")
    model.reset_parameters()

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(rank)  # every rank its own batches
    losses = []
    for _ in range(steps):
        start = torch.randint(0, VOCAB, (8, 1), generator=generator)
        tokens = ((start + torch.arange(SEQ + 1)) % VOCAB).to(device)  # learnable: count up
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    torch.cuda.synchronize()

    full = {key: value.full_tensor().cpu() for key, value in model.state_dict().items()}
    if dist.get_rank() == 0:
        torch.save(full, checkpoint)
    checksum = sum(float(t.double().sum()) for t in full.values())
    with open(f"{out}.rank{dist.get_rank()}", "w") as f:
        json.dump({"world": dist.get_world_size(), "losses": losses, "checksum": checksum,
                   "device": str(device), "device_name": name}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
