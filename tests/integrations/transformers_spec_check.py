"""transformers' device-agnostic helpers with a spec from ``accel spec transformers``.

    python transformers_spec_check.py OUT.json [--fake NAME]

Run from the directory holding ``accel_spec.py`` with ``TRANSFORMERS_TEST_DEVICE_SPEC``
set to that name (transformers imports the spec by its name from the working directory).
``--fake NAME`` installs tests/support/fake_device.py as ``NAME`` first. Writes what
transformers' ``testing_utils`` did with the spec: its device, its ``backend_*`` answers,
a small unittest suite built from its helpers, and tiny models (from configs, nothing
downloaded) on the device against the same models on the CPU.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import unittest
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))


def _tiny_models() -> dict[str, Any]:
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    bert = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37, max_position_embeddings=64)  # fmt: skip
    gpt2 = GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                      bos_token_id=0, eos_token_id=0)  # fmt: skip
    return {"bert": (BertModel, bert), "gpt2": (GPT2LMHeadModel, gpt2)}


def _first_output(output: Any) -> torch.Tensor:
    tensor = output.last_hidden_state if hasattr(output, "last_hidden_state") else output.logits
    assert isinstance(tensor, torch.Tensor)
    return tensor


def _compare_models(device: str) -> dict[str, float]:
    """Largest difference between each tiny model's output on ``device`` and on the CPU."""
    from transformers.testing_utils import backend_manual_seed

    differences = {}
    for name, (model_class, config) in _tiny_models().items():
        backend_manual_seed(device, 0)
        torch.manual_seed(0)
        model = model_class(config).eval()
        ids = torch.randint(
            0, config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1)
        )
        with torch.no_grad():
            on_cpu = _first_output(model(ids))
            model.to(device)
            on_device = _first_output(model(ids.to(device)))
        assert on_device.device.type == device
        differences[name] = float((on_device.to("cpu") - on_cpu).abs().max())
    return differences


def _helper_suite() -> dict[str, Any]:
    """A unittest suite written with transformers' decorators and backend_* helpers."""
    from transformers import testing_utils as tu

    ran: list[str] = []

    class OnTheAccelerator(tu.TestCasePlus):
        @tu.require_torch_accelerator
        def test_seed_makes_device_randomness_repeat(self) -> None:
            tu.backend_manual_seed(tu.torch_device, 1234)
            first = torch.randn(16, device=tu.torch_device).to("cpu")
            tu.backend_manual_seed(tu.torch_device, 1234)
            second = torch.randn(16, device=tu.torch_device).to("cpu")
            self.assertTrue(torch.equal(first, second))  # noqa: PT009  (a unittest case)
            ran.append("seed")

        @tu.require_torch_accelerator
        def test_cache_and_synchronize_hooks_run(self) -> None:
            tu.backend_empty_cache(tu.torch_device)
            tu.backend_synchronize(tu.torch_device)
            ran.append("cache")

        @tu.require_torch_multi_accelerator
        def test_more_than_one_device(self) -> None:
            self.assertGreater(tu.backend_device_count(tu.torch_device), 1)  # noqa: PT009
            ran.append("multi")

    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(OnTheAccelerator)
    )
    return {
        "ran": sorted(ran), "skipped": len(result.skipped),
        "failures": [str(f[1]) for f in result.failures + result.errors],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fake", default=None)
    args = parser.parse_args()
    if args.fake:
        import fake_device

        fake_device.install(args.fake)
    from transformers import testing_utils as tu

    import accel

    device = tu.torch_device
    acc = accel.get_accelerator()
    spec = sys.modules["accel_spec"]
    held = torch.empty(1 << 20, device=device)
    answers = {
        "device": device,
        "device_count": tu.backend_device_count(device),
        "accel_device_count": acc.device_count(),
        "seed_hook_is_accel": tu.BACKEND_MANUAL_SEED[device] == acc.manual_seed,
        "empty_cache_hook_is_accel": tu.BACKEND_EMPTY_CACHE[device] == acc.empty_cache,
        "spec_memory_allocated": spec.MEMORY_ALLOCATED_FN(),
        "accel_memory_allocated": acc.memory_allocated(),
        "suite": _helper_suite(),
        "model_differences": _compare_models(device),
    }
    del held
    Path(args.out).write_text(json.dumps(answers))


if __name__ == "__main__":
    main()
