"""Regression with the spellings the GPU tutorials use: `from torch import cuda`,
`import torch.cuda as tc`, a conditional device, torch.cuda.amp.autocast, .cuda(),
.is_cuda and a checkpoint loaded with map_location. Written for accel's port tests.

Usage: python aliases_and_amp.py OUT.json
"""

import io
import json
import sys

import torch
import torch.cuda as tc
from torch import cuda


def make_data(n=256):
    cuda.manual_seed(0)
    torch.manual_seed(0)
    x = torch.randn(n, 4, device="cuda:0" if torch.cuda.is_available() else "cpu")
    w = torch.tensor([1.0, -2.0, 0.5, 3.0], device=x.device)
    return x, x @ w + 0.1


def train(steps=200):
    x, y = make_data()
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        with torch.cuda.amp.autocast(enabled=False):
            loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tc.synchronize()
    return model, loss.item(), x.is_cuda


def round_trip(model):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    device = 'cuda'
    restored = torch.nn.Linear(4, 1).to(device)
    restored.load_state_dict(torch.load(buffer, map_location=device))
    return all(torch.equal(a, b) for a, b in zip(model.parameters(), restored.parameters()))


if __name__ == "__main__":
    model, final_loss, on_accelerator = train()
    weights = model.weight.detach().cpu().squeeze(0).tolist()
    with open(sys.argv[1], "w") as out:
        json.dump({"loss": final_loss, "weights": weights, "bias": model.bias.item(),
                   "on_accelerator": on_accelerator, "round_trip": round_trip(model),
                   "allocated": cuda.memory_allocated() >= 0}, out)
