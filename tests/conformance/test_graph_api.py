"""GraphAPI: a replayed graph recomputes from its inputs. Runs on backends that claim it."""

from __future__ import annotations

import pytest
import torch

from accel.protocols import Accelerator, GraphAPI, StreamAPI
from tests.conftest import require


def test_replay_recomputes_from_new_inputs(accelerator: Accelerator) -> None:
    require(accelerator, GraphAPI)
    assert isinstance(accelerator, GraphAPI)
    static_in = torch.zeros(1024, device=accelerator.current_device_name())
    if isinstance(accelerator, StreamAPI):  # warm up off the default stream, as torch advises
        side = accelerator.Stream()
        side.wait_stream(accelerator.current_stream())
        with accelerator.stream(side):
            static_in * 2 + 1
        accelerator.current_stream().wait_stream(side)
    graph = accelerator.create_graph()
    with accelerator.capture_to_graph(graph):
        static_out = static_in * 2 + 1
    static_in.fill_(3.0)
    accelerator.replay_graph(graph)
    accelerator.synchronize()
    assert torch.equal(static_out.cpu(), torch.full((1024,), 7.0))
    static_in.fill_(-1.0)
    accelerator.replay_graph(graph)
    accelerator.synchronize()
    assert torch.equal(static_out.cpu(), torch.full((1024,), -1.0))


def test_foreign_graph_objects_are_rejected(accelerator: Accelerator) -> None:
    require(accelerator, GraphAPI)
    assert isinstance(accelerator, GraphAPI)
    with pytest.raises(TypeError, match="graph"):
        accelerator.replay_graph(object())  # type: ignore[arg-type]
