"""A small model trained by Lightning (Fabric, the Trainer or both); JSON files per rank.

    python train.py --api fabric [trainer] --accelerator accel [--strategy S] [--devices N]
                    [--num-nodes N] [--precision P] [--fake NAME]

``--fake NAME`` installs tests/support/fake_device.py as device ``NAME`` first, so accel
selects that device's backend. Every rank trains on its own fixed batch, so losses are
the same whichever accelerator runs them, and DDP's averaged gradients make every
rank's model the same. The APIs run one after another in the same process, each in a
process group of its own (the one before is destroyed). ``--out DIR`` gets
``rank<N>-<api>.json`` (ranks share stdout, where lines would interleave): rank, API,
device, the process group's backend configuration, the losses, the dtype the model's
output had and the parameters' sum. stderr gets a line ``train.py: --api <api>`` before
each API's output; an API that raises leaves no file, prints its traceback and
``train.py: --api <api> failed``, and the next API runs; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

STEPS = 6


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(rank))
    return x, x.sum(dim=1, keepdim=True)


def _report(
    out: str, api: str, rank: int, device: torch.device, losses: list[float], dtype: str,
    model: Any, synced: float,
) -> None:  # fmt: skip
    import torch.distributed as dist

    backend = str(dist.get_backend_config()) if dist.is_initialized() else None
    total = sum(float(p.detach().to("cpu", torch.float64).sum()) for p in model.parameters())
    result = {
        "rank": rank, "api": api, "device": str(device), "backend": backend, "losses": losses,
        "output_dtype": dtype, "parameter_sum": total, "synced": synced,
    }  # fmt: skip
    (Path(out) / f"rank{rank}-{api}.json").write_text(json.dumps(result))


def _plugins(args: argparse.Namespace, api: str) -> list[Any]:
    if not args.accel_precision:
        return []
    import accel.integrations.lightning as accel_lightning

    make = (
        accel_lightning.fabric_precision if api == "fabric" else accel_lightning.trainer_precision
    )
    return [make(args.accel_precision)]


def run_fabric(args: argparse.Namespace) -> None:
    import lightning

    fabric = lightning.Fabric(
        accelerator=args.accelerator, strategy=args.strategy, devices=args.devices,
        num_nodes=args.num_nodes, precision=args.precision, plugins=_plugins(args, "fabric"),
    )  # fmt: skip
    fabric.launch()
    # Module first, optimizer after: the fake device's tensors are wrapper tensors, which
    # Module.to() replaces rather than updates (the order Lightning documents anyway).
    model = fabric.setup_module(_model())
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.05))
    x, y = (t.to(fabric.device) for t in _batch(fabric.global_rank))
    losses, dtype = [], ""
    for _ in range(STEPS):
        optimizer.zero_grad()
        with fabric.autocast():
            out = model(x)
        dtype = str(out.dtype)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        fabric.backward(loss)
        optimizer.step()
        losses.append(float(loss))
    # A metric averaged over the ranks: an integer, as Lightning's own counters are.
    count = torch.tensor(3 * fabric.global_rank + 1, device=fabric.device)
    synced = float(fabric.all_reduce(count, reduce_op="mean"))
    _report(args.out, "fabric", fabric.global_rank, fabric.device, losses, dtype, model, synced)


def run_trainer(args: argparse.Namespace) -> None:
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _model()
            self.losses: list[float] = []
            self.dtype_seen = ""

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = _batch(self.global_rank)
            out = self.net(x.to(self.device))
            self.dtype_seen = str(out.dtype)
            loss = torch.nn.functional.mse_loss(out.float(), y.to(self.device))
            self.losses.append(float(loss))
            self.log("train_loss", loss.detach(), sync_dist=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            # Under inference mode, averaged with Lightning's integer batch-size counters.
            x, y = _batch(self.global_rank)
            loss = torch.nn.functional.mse_loss(self.net(x.to(self.device)).float(), y)
            self.log("val_loss", loss, sync_dist=True)

        def val_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(range(2), batch_size=1)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(range(STEPS), batch_size=1)

    module = Module()
    trainer = lightning.Trainer(
        accelerator=args.accelerator, strategy=args.strategy, devices=args.devices,
        num_nodes=args.num_nodes, precision=args.precision, plugins=_plugins(args, "trainer"),
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=args.root, use_distributed_sampler=False,
    )  # fmt: skip
    trainer.fit(module)
    synced = float(trainer.callback_metrics["val_loss"])
    _report(args.out, "trainer", trainer.global_rank, trainer.strategy.root_device,
            module.losses, module.dtype_seen, module, synced)  # fmt: skip


RUNS = {"fabric": run_fabric, "trainer": run_trainer}


# Each API's process group's store, kept to the end (see _leave_group).
_stores: list[object] = []


def _leave_group() -> None:
    """Destroy the process group Lightning left up (gloo's can abort the interpreter at
    exit: "terminate called without an active exception"), so that the next API
    initializes its own rather than join this one.

    torch names the next default group "0" again, which gives it this group's store keys:
    under torchelastic the agent's store outlives the group, and the new gloo group read
    and dialed this one's stale addresses. Numbering on gives it keys of its own. Started
    by hand, rank 0's process serves the store, which goes with its last user: kept, it
    stays up for a rank that meets on it for the next API before rank 0 has left this one
    (rank 0's next ``init_process_group`` binds MASTER_PORT again without "address in
    use" because torch reuses a TCPStore server already listening on that port in the
    same process).
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    _stores.append(c10d._get_default_store())
    groups = c10d._world.group_count
    dist.destroy_process_group()
    c10d._world.group_count = groups


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", nargs="+", choices=tuple(RUNS), required=True)
    parser.add_argument("--accelerator", default="accel")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--devices", default="1")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--precision", default=None)
    parser.add_argument("--accel-precision", default=None)
    parser.add_argument("--fake", default=None)
    parser.add_argument("--root", default=".", help="the Trainer's default_root_dir")
    parser.add_argument("--out", required=True, help="directory for rank<N>-<api>.json")
    args = parser.parse_args()
    if args.fake:
        import fake_device

        fake_device.install(args.fake)
    import torch.distributed as dist

    import accel.integrations.lightning  # noqa: F401  (registers "accel")

    # accel's Lightning accelerator names "accel" torch.distributed's default backend for
    # the CPU, and Fabric never tears its accelerator down: each API starts from the table
    # as it was, so the Trainer's "cpu:accel" is the Trainer's own doing.
    backends = dict(dist.Backend.default_device_backend_map)
    failed = False
    for api in args.api:
        print(f"train.py: --api {api}", file=sys.stderr, flush=True)
        dist.Backend.default_device_backend_map.clear()
        dist.Backend.default_device_backend_map.update(backends)
        try:
            RUNS[api](args)
        except Exception:
            traceback.print_exc()
            print(f"train.py: --api {api} failed", file=sys.stderr, flush=True)
            failed = True
        finally:
            _leave_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
