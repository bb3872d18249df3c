"""A small character-level language model, trained the way many single-file GPU scripts are
written: configuration in module-level variables, DDP when launched by torchrun, autocast
and a GradScaler. Written for accel's port tests (not copied from anywhere): `accel port`
must turn it into a script that also trains on the CPU, alone and as two DDP ranks.

Usage: python gpt_train.py OUT.json   (or under torchrun / accel run)
"""

import json
import os
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# configuration
batch_size = 16
block_size = 8
max_iters = 40
learning_rate = 1e-2
device = 'cuda'  # examples: 'cpu', 'cuda', 'cuda:0'
backend = 'nccl'  # the collectives library for DDP
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
out_path = sys.argv[1]
# -----------------------------------------------------------------------------

ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    world_size = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{ddp_local_rank}'
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
else:
    ddp_rank, world_size, master_process = 0, 1, True

torch.manual_seed(1337 + ddp_rank)
device_type = 'cuda' if 'cuda' in device else 'cpu'  # for autocast
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

text = "the quick brown fox jumps over the lazy dog. " * 40
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    if device_type == 'cuda':
        # pin arrays x,y, which allows us to move them to GPU asynchronously
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class TinyLM(nn.Module):
    def __init__(self, vocab_size, n_embd=32):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets):
        positions = torch.arange(idx.shape[1], device=idx.device)
        h = self.tok(idx) + self.pos(positions)
        logits = self.head(h + self.mlp(h))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


torch.manual_seed(0)  # identical initial weights on every rank
model = TinyLM(len(chars)).to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None)
torch.manual_seed(1337 + ddp_rank)  # different data on every rank

losses = []
for it in range(max_iters):
    X, Y = get_batch()
    with ctx:
        _, loss = model(X, Y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())

checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
with open(f"{out_path}.rank{ddp_rank}", "w") as out:
    json.dump({"losses": losses, "checksum": checksum, "world": world_size,
               "device": str(X.device), "device_type": device_type}, out)
if ddp:
    destroy_process_group()
