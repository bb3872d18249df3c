"""DeepSpeed's own optimizer classes, stepped through their op builders, against torch.

Prints one JSON line: for each optimizer, the largest difference from the torch reference
after a few steps, and which builder class served it. Run with the integration active
(ACCEL_DEEPSPEED=1) by tests/integrations/deepspeed/test_training.py; with DeepSpeed's own JIT
builds it measures the same thing for native DeepSpeed.
"""

from __future__ import annotations

import json

import torch


def compare(make_ds, make_reference, steps: int = 5) -> float:
    torch.manual_seed(0)
    shapes = [(64, 33), (129,), (7, 5, 3)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt_ds, opt_ref = make_ds(ours), make_reference(ref)
    for _ in range(steps):
        for a, b in zip(ours, ref, strict=True):
            grad = torch.randn_like(a)
            a.grad, b.grad = grad.clone(), grad.clone()
        opt_ds.step()
        opt_ref.step()
    return max((a - b).abs().max().item() for a, b in zip(ours, ref, strict=True))


class _Lion:
    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float]) -> None:
        self.params, self.lr, self.betas = params, lr, betas
        self.state: dict[int, torch.Tensor] = {}

    def step(self) -> None:
        for p in self.params:
            m = self.state.setdefault(id(p), torch.zeros_like(p))
            assert p.grad is not None
            direction = torch.sign(m * self.betas[0] + p.grad * (1 - self.betas[0]))
            p.data.add_(direction, alpha=-self.lr)
            m.mul_(self.betas[1]).add_(p.grad, alpha=1 - self.betas[1])


def main() -> None:
    from zero_parity import ask_for_cpu_info_once  # this script's directory is on sys.path

    ask_for_cpu_info_once()
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion
    from deepspeed.ops.op_builder import CPUAdamBuilder, FusedLionBuilder

    lr, betas = 1e-2, (0.9, 0.999)
    result = {
        "cpu_adam": compare(
            lambda p: DeepSpeedCPUAdam(p, lr=lr, betas=betas, weight_decay=0.01),
            lambda p: torch.optim.AdamW(p, lr=lr, betas=betas, weight_decay=0.01),
        ),
        "cpu_adam_l2": compare(
            lambda p: DeepSpeedCPUAdam(p, lr=lr, betas=betas, weight_decay=0.01, adamw_mode=False),
            lambda p: torch.optim.Adam(p, lr=lr, betas=betas, weight_decay=0.01),
        ),
        "fused_adam": compare(
            lambda p: FusedAdam(p, lr=lr, betas=betas, weight_decay=0.01),
            lambda p: torch.optim.AdamW(p, lr=lr, betas=betas, weight_decay=0.01),
        ),
        "cpu_adagrad": compare(
            lambda p: DeepSpeedCPUAdagrad(p, lr=lr, eps=1e-10),
            lambda p: torch.optim.Adagrad(p, lr=lr, eps=1e-10),
        ),
        "cpu_lion": compare(
            lambda p: DeepSpeedCPULion(p, lr=lr, betas=(0.9, 0.99), weight_decay=0.0),
            lambda p: _Lion(p, lr, (0.9, 0.99)),
        ),
        "fused_lion": compare(
            lambda p: FusedLion(p, lr=lr, betas=(0.9, 0.99), weight_decay=0.0),
            lambda p: _Lion(p, lr, (0.9, 0.99)),
        ),
        "builders": [CPUAdamBuilder.__module__, FusedLionBuilder.__module__],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
