"""Data-parallel regression with resumable snapshots, written the way DDP tutorials place
work on GPUs: one integer GPU id per process (`model.to(gpu_id)`, `x.to(self.gpu_id)`,
`DDP(model, device_ids=[gpu_id])`), snapshots loaded back with `map_location`. Written for
accel's port tests (not copied from anywhere): `accel port` must turn it into a script
that also runs on the CPU, alone, as DDP ranks on one node or on two, and resuming from
its own snapshot.

Usage: python ddp_snapshot.py EPOCHS SNAPSHOT OUT.json   (alone, or under torchrun / accel run)
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

TRUE_WEIGHTS = torch.tensor([[1.5], [-2.0], [0.25], [3.0]])


def make_data(rank: int, samples: int = 256):
    generator = torch.Generator().manual_seed(100 + rank)  # every rank its own shard
    x = torch.randn(samples, 4, generator=generator)
    return x, x @ TRUE_WEIGHTS + 0.5


class Trainer:
    def __init__(self, gpu_id: int, snapshot_path: str, distributed: bool):
        self.gpu_id = gpu_id
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        torch.manual_seed(0)  # the same initial replica on every rank
        self.model = torch.nn.Linear(4, 1).to(gpu_id)
        if os.path.exists(snapshot_path):
            self._load_snapshot()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        if distributed:
            self.model = DDP(self.model, device_ids=[gpu_id])

    def _load_snapshot(self):
        snapshot = torch.load(self.snapshot_path, map_location=0)  # tensors straight to GPU 0
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _save_snapshot(self, epoch: int):
        model = self.model.module if isinstance(self.model, DDP) else self.model
        torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch + 1}, self.snapshot_path)

    def train(self, epochs: int, rank: int):
        x, y = make_data(rank)
        losses = []
        for epoch in range(self.epochs_run, epochs):
            for start in range(0, len(x), 32):
                source = x[start:start + 32].to(self.gpu_id)
                target = y[start:start + 32].to(self.gpu_id)
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(source), target)
                loss.backward()
                self.optimizer.step()
            losses.append(loss.item())
            if rank == 0:
                self._save_snapshot(epoch)
        return losses


def main():
    epochs, snapshot_path, out_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    distributed = "RANK" in os.environ
    if distributed:
        init_process_group(backend="nccl")
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    trainer = Trainer(local_rank, snapshot_path, distributed)
    started_at = trainer.epochs_run
    losses = trainer.train(epochs, rank)
    model = trainer.model.module if distributed else trainer.model
    weights = model.weight.detach().cpu().flatten().tolist()
    report = {
        "world": int(os.environ.get("WORLD_SIZE", 1)),
        "started_at": started_at,
        "losses": losses,
        "weights": weights,
        "bias": model.bias.item(),
        "device": str(model.weight.device),
    }
    with open(f"{out_path}.rank{rank}", "w") as handle:
        json.dump(report, handle)
    if distributed:
        destroy_process_group()


if __name__ == "__main__":
    main()
