"""`accel port`: CUDA code rewritten by rule, then compiled and run on the CPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import accel
from accel import get_accelerator
from accel.cli import main
from accel.port.rewrite import port_source
from accel.protocols import DeviceProperties

CUDA_CODE = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist


    def seeded_noise(seed):
        # Reproducible noise on the GPU.
        torch.cuda.manual_seed(seed)
        return torch.randn(4, device="cuda")


    def place(t, rank: int):
        moved = t.cuda()
        other = torch.zeros(2, device=f"cuda:{rank}")
        first = torch.ones(1).to('cuda:0')
        return moved.device.type, other.device.type, first.device.type, torch.cuda.device_count()


    def peak_after_alloc():
        torch.cuda.reset_peak_memory_stats()
        x = torch.ones(1 << 20, device=torch.cuda.current_device())
        torch.cuda.synchronize()
        index = torch.cuda.current_device()
        fits = torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
        return fits, x.sum().item(), index


    def rng_round_trip():
        state = torch.cuda.get_rng_state()
        generator = torch.cuda.default_generators[0]
        a = torch.rand(3, device="cuda", generator=generator)
        torch.cuda.set_rng_state(state)
        b = torch.rand(3, device="cuda")
        return torch.equal(a, b)


    def staged(t):
        return t.pin_memory().sum().item()


    def comm_backend():
        options = dict(backend="nccl", timeout=30)
        return options["backend"]


    def log_line(rank):
        # Strings that only mention CUDA are not device positions.
        table = {"cuda": rank}
        return "running on cuda:0", table
    """
)


@pytest.fixture
def ported() -> str:
    return port_source(CUDA_CODE).source


@pytest.mark.usefixtures("fresh_selection")
def test_ported_code_runs_on_cpu_with_the_expected_results(
    ported: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")  # the expectations below are the CPU's
    namespace: dict[str, object] = {}
    exec(compile(ported, "ported.py", "exec"), namespace)
    functions = {name: value for name, value in namespace.items() if callable(value)}

    torch.manual_seed(7)
    expected_noise = torch.randn(4)
    assert torch.equal(functions["seeded_noise"](7), expected_noise)
    assert functions["place"](torch.ones(2), 0) == ("cpu", "cpu", "cpu", 1)
    fits, total, index = functions["peak_after_alloc"]()
    assert fits is True
    assert total == float(1 << 20)
    assert index == 0
    assert functions["rng_round_trip"]() is True
    assert functions["staged"](torch.ones(3)) == 3.0
    assert functions["comm_backend"]() == get_accelerator().communication_backend_name()
    assert functions["log_line"](1) == ("running on cuda:0", {"cuda": 1})


def test_every_rule_produces_the_agnostic_spelling(ported: str) -> None:
    for expected in (
        "get_accelerator().manual_seed(seed)",
        "torch.randn(4, device=get_accelerator().device_name())",
        "moved = t.to(device=get_accelerator().device_name())",
        "device=get_accelerator().device_name(rank)",
        ".to(get_accelerator().device_name(0))",
        "device=get_accelerator().current_device_name()",
        "index = get_accelerator().current_device()",
        "get_accelerator().default_generator(0)",
        "get_accelerator().pin_memory(t).sum()",
        "backend=get_accelerator().communication_backend_name()",
    ):
        assert expected in ported, expected
    assert "torch.cuda" not in ported


def test_comments_formatting_and_unrelated_strings_survive(ported: str) -> None:
    assert "# Reproducible noise on the GPU." in ported
    assert "# Strings that only mention CUDA are not device positions." in ported
    assert '{"cuda": rank}' in ported
    assert '"running on cuda:0"' in ported
    assert ported.count("\n\n\ndef ") == CUDA_CODE.count("\n\n\ndef ")


def test_the_import_is_added_once_and_porting_is_idempotent(ported: str) -> None:
    assert ported.count("from accel import get_accelerator") == 1
    again = port_source(ported)
    assert again.source == ported
    assert not again.changed
    already = "from accel import get_accelerator\nimport torch\ntorch.cuda.synchronize()\n"
    assert port_source(already).source.count("get_accelerator\n") == 1


def test_code_without_cuda_is_untouched() -> None:
    source = "import torch\nx = torch.ones(2, device='cpu')\nprint('no cuda here')\n"
    result = port_source(source)
    assert result.source == source
    assert result.findings == []


def test_init_process_group_positional_backend() -> None:
    source = "import torch.distributed as dist\ndist.init_process_group('nccl', rank=0)\n"
    assert (
        "dist.init_process_group(get_accelerator().communication_backend_name(), rank=0)"
        in port_source(source).source
    )


def test_graph_code_is_left_alone_and_reported() -> None:
    source = textwrap.dedent(
        """
        import torch
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x * 2
        stream = torch.cuda.ExternalStream(0)
        """
    )
    result = port_source(source)
    assert result.source == source
    manual = [(f.line, f.message) for f in result.findings if not f.rewritten]
    assert manual[0][0] == 3
    assert "torch.cuda.CUDAGraph: no safe automatic rewrite" in manual[0][1]
    assert "isinstance(acc, GraphAPI)" in manual[0][1]
    assert manual[1][0] == 4
    assert any(
        line == 6 and "torch.cuda.ExternalStream has no accel equivalent" in m for line, m in manual
    )


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_cli_rewrites_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "train.py", CUDA_CODE)
    assert main(["port", str(tmp_path)]) == 0
    assert path.read_text() == port_source(CUDA_CODE).source
    assert f"{path}: " in capsys.readouterr().out


def test_cli_diff_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "train.py", CUDA_CODE)
    assert main(["port", "--diff", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"--- a/{path}" in out
    assert "+    torch.cuda" not in out
    assert "+    get_accelerator().manual_seed(seed)" in out
    assert path.read_text() == CUDA_CODE


def test_cli_check_reports_positions_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "train.py", CUDA_CODE)
    clean = _write(tmp_path, "clean.py", "x = 1\n")
    assert main(["port", "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:8:5: torch.cuda.manual_seed() -> get_accelerator().manual_seed()" in out
    assert path.read_text() == CUDA_CODE
    assert main(["port", "--check", str(clean)]) == 0


def test_cli_reports_unparsable_and_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _write(tmp_path, "broken.py", "def f(:\n")
    assert main(["port", str(broken)]) == 2
    assert f"{broken}: cannot be ported: line 1: invalid syntax" in capsys.readouterr().err
    assert main(["port", str(tmp_path / "absent.py")]) == 2
    assert "absent.py: no such file or directory" in capsys.readouterr().err


def _ported(source: str) -> str:
    return port_source(textwrap.dedent(source)).source


def test_a_device_variable_is_rewritten_only_where_python_scoping_makes_it_one() -> None:
    ported = _ported(
        """
        import torch
        device = 'cuda'
        label = 'cuda'
        class Config:
            device = 'cuda'
        def train(rank: int):
            local = f'cuda:{rank}'
            shadow = 'cuda'
            x = torch.ones(2).to(local)
            return torch.zeros(1, device=device), {label: 1}
        def report(shadow):
            return torch.ones(1, device=shadow)
        """
    )
    assert "device = get_accelerator().device_name()\n" in ported  # used in train()
    assert "local = get_accelerator().device_name(rank)" in ported
    assert "label = 'cuda'" in ported  # only ever a dict key
    assert "    device = 'cuda'" in ported  # a class attribute: methods cannot see it
    assert "shadow = 'cuda'" in ported  # report()'s shadow is its own parameter


def test_backend_variables_aliases_and_the_device_type_idiom() -> None:
    ported = _ported(
        """
        import torch.distributed as dist
        from torch import cuda
        import torch.cuda as tc
        import torch as th
        backend = 'nccl'
        device = 'cuda:0'
        device_type = 'cuda' if 'cuda' in device else 'cpu'
        other = 'cuda' if 'cuda' in name else 'cpu'
        dist.init_process_group(backend)
        cuda.synchronize(); tc.empty_cache(); th.cuda.manual_seed(1)
        th.ones(1).to(device)
        """
    )
    assert "backend = get_accelerator().communication_backend_name()" in ported
    assert "device_type = th.device(device).type" in ported
    assert "other = 'cuda' if 'cuda' in name else 'cpu'" in ported  # name: not a known device
    assert "get_accelerator().synchronize(); get_accelerator().empty_cache(); " \
        "get_accelerator().manual_seed(1)" in ported  # fmt: skip


@pytest.mark.parametrize(
    "expression",
    [
        "'cuda' if 'cuda' not in device else 'cpu'",  # the opposite of the device type
        "'cuda' if 'cuda' == device else 'cpu'",  # 'cpu' for 'cuda:0'
        "'cuda' if 'cuda' != device else 'cpu'",
        "'cpu' if 'cuda' in device else 'cuda'",
        "'gpu' if 'cuda' in device else 'cpu'",
        "'cuda' if 'cuda' in device else 'host'",
        "'cuda' if 'cuda:0' in device else 'cpu'",
        "'cuda' if 'cuda' in device.type else 'cpu'",
        "'cuda' if 'cuda' in device in names else 'cpu'",
    ],
    ids=[
        "not-in",
        "equal",
        "not-equal",
        "swapped",
        "other-type",
        "other-fallback",
        "indexed",
        "attribute",
        "chained",
    ],
)
def test_only_the_device_type_idiom_itself_becomes_torch_device_type(expression: str) -> None:
    # Each of these means something other than "the type of device", which is what
    # torch.device(device).type says.
    ported = _ported(
        f"""
        import torch
        device = 'cuda:0'
        kind = {expression}
        torch.ones(1).to(device)
        """
    )
    assert f"kind = {expression}\n" in ported
    assert "device = get_accelerator().device_name(0)\n" in ported  # a known device


def test_amp_is_rewritten_with_keywords_and_reported_with_positional_arguments() -> None:
    result = port_source(
        "import torch\n"
        "scaler = torch.cuda.amp.GradScaler(init_scale=1024.0)\n"
        "with torch.cuda.amp.autocast(dtype=torch.bfloat16):\n    pass\n"
        "with torch.cuda.amp.autocast(True, torch.float16):\n    pass\n"
    )
    assert "torch.amp.GradScaler(get_accelerator().device_name(), init_scale=1024.0)" in (
        result.source
    )
    assert "torch.autocast(get_accelerator().device_name(), dtype=torch.bfloat16)" in result.source
    assert "torch.cuda.amp.autocast(True, torch.float16)" in result.source  # left alone
    manual = [f for f in result.findings if not f.rewritten]
    assert [(f.line, f.rule) for f in manual] == [(5, "manual")]
    assert "torch.autocast(get_accelerator().device_name(), dtype=..., enabled=...)" in (
        manual[0].message
    )


def test_explain_names_each_rule_and_strict_fails_on_manual_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "graphs.py", "import torch\ng = torch.cuda.CUDAGraph()\n")
    assert main(["port", "--check", str(path)]) == 0  # nothing to rewrite: not a failure
    assert main(["port", "--check", "--strict", str(path)]) == 1
    capsys.readouterr()
    assert main(["port", "--strict", str(path)]) == 2  # without --check it would count nothing
    assert "--strict counts findings for --check" in capsys.readouterr().err
    device = _write(tmp_path, "device.py", "import torch\nx = torch.ones(1, device='cuda')\n")
    assert main(["port", "--explain", "--diff", str(device)]) == 0
    out = capsys.readouterr().out
    assert "[device-position] a CUDA device literal where torch expects a device" in out


@pytest.mark.parametrize(
    "line",
    [
        "from torch.cuda import synchronize as s\ns()\n",
        "from torch.cuda import *\n",
        "f = getattr(torch.cuda, 'synchronize')\n",
        "from torch.cuda.amp import autocast\n",
        "cu = torch.cuda\ncu.synchronize()\n",
        "cu = getattr(torch, 'cuda')\n",
        "def f(mod=torch.cuda):\n    mod.synchronize()\n",
        "parser.add_argument('--backend', default='nccl')\n",
        "use_nccl = dist.get_backend() == 'nccl'\n",
    ],
    ids=[
        "from-import-as",
        "star-import",
        "getattr",
        "submodule",
        "module-bound",
        "module-looked-up",
        "module-passed",
        "nccl-default",
        "nccl-compared",
    ],
)
def test_cuda_names_bound_or_looked_up_by_name_are_reported(
    tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # These escaped every rule: --check --strict passed code that calls CUDA directly.
    path = _write(tmp_path, "sneaky.py", "import torch\n" + line)
    assert main(["port", "--check", "--strict", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2:" in out, out


@pytest.mark.parametrize(
    "imported",
    ["import torch.cuda as tc", "from torch import cuda as tc", "from torch import cuda"],
)
def test_the_cuda_module_handed_on_by_its_alias_is_reported(imported: str) -> None:
    # `helper(tc)` was neither rewritten nor reported: no rule sees what helper() does.
    name = imported.split()[-1]
    source = f"""
        {imported}

        def helper(module):
            return module.device_count()

        def main():
            count = helper({name})
            current = {name}
            {name}.synchronize()
            return count, current
        """
    findings = port_source(textwrap.dedent(source)).findings
    manual = [(f.line, f.message) for f in findings if not f.rewritten]
    assert [line for line, _ in manual] == [8, 9], manual
    assert all(f"{name} (torch.cuda) is used as a value" in message for _, message in manual)
    assert [f.line for f in findings if f.rewritten] == [10]  # a call through it is ported


def test_a_local_name_that_shadows_torch_or_its_cuda_module_is_not_taken_for_them() -> None:
    # A parameter `cuda` (a flag, another object) was ported as torch.cuda: `cuda.synchronize()`
    # became get_accelerator().synchronize() on an object that was not torch's.
    source = """
        import torch
        from torch import cuda

        def with_parameters(torch, cuda):
            cuda.synchronize()
            return torch.cuda.current_device(), cuda

        def outer():
            cuda = object()

            def inner():
                return cuda.synchronize()
            return inner

        class Holder:
            cuda = 3

            def method(self):
                return cuda.synchronize()
        """
    result = port_source(textwrap.dedent(source))
    ported = result.source
    assert "    cuda.synchronize()\n    return torch.cuda.current_device(), cuda" in ported
    assert "return cuda.synchronize()\n    return inner" in ported  # the enclosing function's
    assert "return get_accelerator().synchronize()" in ported  # a class body shadows nothing
    assert [f.line for f in result.findings] == [20]


def test_a_comparison_with_nccl_is_reported_as_one() -> None:
    # Told to use the accelerator's backend name, a person would make an NCCL-only branch
    # run on every backend; the finding says when that is right.
    result = port_source("import torch.distributed as dist\nuse = dist.get_backend() == 'nccl'\n")
    (finding,) = [f for f in result.findings if not f.rewritten]
    assert finding.message.startswith("a comparison with 'nccl' is false on every backend but")
    assert "where the code it guards runs on any backend" in finding.message


def test_importing_torch_cuda_and_calling_through_it_are_not_uses_of_the_module() -> None:
    source = (
        "import torch.cuda\nimport torch.cuda as tc\ntorch.cuda.synchronize()\ntc.empty_cache()\n"
    )
    result = port_source(source)
    assert [f for f in result.findings if not f.rewritten] == []
    assert "get_accelerator().synchronize()" in result.source


CUSTOM_TYPES = """\
import torch


class SimpleCustomBatch:
    # torch's documented custom-batch pinning pattern
    def __init__(self, data):
        self.inp = torch.stack([d[0] for d in data])

    def pin_memory(self):
        self.inp = self.inp.pin_memory()
        return self


class Model:
    def __init__(self):
        self.on_gpu = False

    def cuda(self):
        self.on_gpu = True
        return self


batch = SimpleCustomBatch([(torch.ones(2),), (torch.zeros(2),)])
model = Model().cuda()
pinned = batch.pin_memory if torch.cuda.is_available() else None
"""


def test_methods_the_module_defines_itself_are_not_rewritten_as_tensor_methods() -> None:
    # Model().cuda() became Model().to(...) (AttributeError), and batch.pin_memory()
    # get_accelerator().pin_memory(batch) (TypeError): neither receiver is a tensor.
    result = port_source(CUSTOM_TYPES)
    assert "Model().cuda()" in result.source
    assert "self.inp.pin_memory()" in result.source
    assert "get_accelerator().is_available()" in result.source  # the rest is still ported
    manual = [f.line for f in result.findings if f.rule == "manual"]
    assert manual == [10, 24]
    namespace: dict[str, object] = {}
    exec(compile(result.source, "ported.py", "exec"), namespace)
    assert namespace["model"].on_gpu is True


def test_an_int_is_rewritten_in_a_device_position_only_where_it_provably_is_one() -> None:
    ported = _ported(
        """
        import os
        import torch
        rank = int(os.environ["LOCAL_RANK"])
        maybe = 0
        maybe = "cpu"
        x = torch.ones(2).to(0)
        y = torch.ones(2).to(rank)
        z = torch.ones(2).to(maybe)
        state = torch.load("c.pt", map_location=0)
        torch.cuda.set_device(rank)
        class Worker:
            def __init__(self, gpu: int, other):
                self.gpu = gpu
                self.other = other
                self.slot = 1
                self.slot = other
            def run(self, t):
                for index in range(2):
                    t.to(index)
                return t.to(self.gpu), t.to(self.other), t.to(self.slot), t.to(torch.float16)
        """
    )
    assert "torch.ones(2).to(get_accelerator().device_name(0))" in ported
    assert "torch.ones(2).to(get_accelerator().device_name(rank))" in ported
    assert "torch.ones(2).to(maybe)" in ported  # also bound to a string: not provably an int
    assert "map_location=get_accelerator().device_name(0)" in ported
    assert "\nset_device(rank)" in ported  # an index, as set_device takes it
    assert "t.to(get_accelerator().device_name(index))" in ported  # range()'s items
    assert "t.to(get_accelerator().device_name(self.gpu))" in ported  # an int parameter
    assert "t.to(self.other)" in ported  # unannotated
    assert "t.to(self.slot)" in ported  # assigned an int and something else
    assert "t.to(torch.float16)" in ported


def test_members_added_after_the_first_release_become_accels_functions() -> None:
    # A backend written for the first release has none of these members (docs/architecture.md,
    # "Protocol evolution"): accel's functions serve it, so the ported script runs there too.
    result = port_source(
        textwrap.dedent(
            """
            import torch
            torch.cuda.set_device('cuda:1')
            torch.cuda.set_device(f'cuda:{rank}')  # rank: not provably an int
            torch.cuda.set_device(rank)
            props = torch.cuda.get_device_properties(0)
            torch.cuda.reset_accumulated_memory_stats()
            with torch.cuda.device(1):
                torch.cuda.synchronize()
            """
        )
    )
    assert result.source.splitlines()[2:] == [
        "from accel import (", "    device_index,", "    get_accelerator,",
        "    get_device_properties,", "    reset_accumulated_memory_stats,", "    set_device,",
        ")", "set_device(1)", "set_device(f'cuda:{rank}')  # rank: not provably an int",
        "set_device(rank)",
        "props = get_device_properties(0)", "reset_accumulated_memory_stats()",
        "with device_index(1):", "    get_accelerator().synchronize()",
    ]  # fmt: skip
    assert {f.rule for f in result.findings} == {"function", "direct", "manual"}
    manual = [f for f in result.findings if not f.rewritten]
    assert [(f.line, f.column) for f in manual] == [(4, 23)]  # the f-string, reported
    again = port_source(result.source)  # ported once: nothing more, no new import
    assert again.source == result.source
    assert again.findings == []  # accel's set_device now: a person was told the first time


def test_a_module_that_binds_the_functions_name_imports_accels_under_an_alias() -> None:
    ported = _ported(
        """
        import torch
        def set_device(rank):
            torch.cuda.set_device(rank)
        device_index = 3
        with torch.cuda.device(1):
            pass
        """
    )
    assert "    _accel_set_device(rank)" in ported
    assert "with _accel_device_index(1):" in ported
    assert "    _accel_device_index as _accel_device_index,\n" not in ported
    assert "    device_index as _accel_device_index,\n" in ported
    assert "    set_device as _accel_set_device,\n" in ported
    assert port_source(ported).source == ported  # the aliases are found again


# Ways a module binds a name of its own that accel port would insert (get_accelerator).
_OWN_GET_ACCELERATOR = {
    "function": "def get_accelerator():\n    CALLED.append(1)\n    return 'mine'",
    "class": "class get_accelerator:\n    def __init__(self):\n        CALLED.append(1)",
    "assignment": "get_accelerator = lambda: CALLED.append(1)",
    "import-as": "from itertools import count as get_accelerator",
    "global": "def setup():\n    global get_accelerator\n    get_accelerator = CALLED.append",
    "parameter": "def helper(get_accelerator=None):\n    return get_accelerator",
    "star-import": "from itertools import *",
    "except-as": "try:\n    pass\nexcept Exception as get_accelerator:\n    pass",
}


@pytest.mark.usefixtures("fresh_selection")
@pytest.mark.parametrize("binding", _OWN_GET_ACCELERATOR.values(), ids=_OWN_GET_ACCELERATOR)
def test_a_module_with_its_own_get_accelerator_calls_accels_under_an_alias(
    binding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Calling the module's own get_accelerator() compiled and failed at run time.
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")
    source = f"import torch\nCALLED = []\n{binding}\n\n\ndef place(t):\n    return t.cuda()\n"
    ported = port_source(source).source
    assert "    return t.to(device=_accel_get_accelerator().device_name())\n" in ported
    assert "from accel import get_accelerator as _accel_get_accelerator\n" in ported
    namespace: dict[str, object] = {}
    exec(compile(ported, "ported.py", "exec"), namespace)
    place = namespace["place"]
    assert callable(place)
    moved = place(torch.ones(2))
    assert isinstance(moved, torch.Tensor)
    assert moved.device.type == "cpu"
    assert namespace["CALLED"] == []
    assert port_source(ported).source == ported


def test_an_alias_that_is_taken_too_gets_the_next_free_one() -> None:
    ported = _ported(
        """
        import torch
        from helpers import get_accelerator, _accel_get_accelerator
        from ddp import ddp_device_ids
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.cuda.synchronize()
        DDP(model, device_ids=[rank])
        """
    )
    assert "_accel_get_accelerator_2().synchronize()" in ported
    assert "DDP(model, device_ids=_accel_ddp_device_ids(rank))" in ported
    assert "    get_accelerator as _accel_get_accelerator_2,\n" in ported
    assert "    ddp_device_ids as _accel_ddp_device_ids,\n" in ported
    assert port_source(ported).source == ported


def test_a_module_too_large_to_analyse_calls_accel_through_the_aliases() -> None:
    # Whether it binds get_accelerator or set_device is not known: any name may be taken.
    from accel.port.facts import ANALYSIS_LIMIT

    filler = "x = 1\n" * (ANALYSIS_LIMIT // 6 + 1)
    source = f"import torch\n{filler}torch.cuda.set_device(0)\nt.cuda()\n"
    ported = port_source(source).source
    assert ported.endswith(
        "_accel_set_device(0)\nt.to(device=_accel_get_accelerator().device_name())\n"
    )
    assert ported.startswith(
        "import torch\nfrom accel import (\n    get_accelerator as _accel_get_accelerator,\n"
        "    set_device as _accel_set_device,\n)\n"
    )
    assert port_source(ported).source == ported


@pytest.mark.usefixtures("fresh_selection")
def test_accel_imported_under_another_name_still_gets_the_name_the_port_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `from accel import get_accelerator as acc` does not bind get_accelerator: it was
    # taken for the import the rewrite needs, and the ported module raised NameError.
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")
    ported = _ported(
        """
        import torch
        from accel import get_accelerator as acc
        moved = torch.ones(2).cuda()
        """
    )
    assert "from accel import get_accelerator\n" in ported
    namespace: dict[str, object] = {}
    exec(compile(ported, "ported.py", "exec"), namespace)
    assert isinstance(namespace["moved"], torch.Tensor)


def test_ported_device_calls_run_on_a_first_release_backend() -> None:
    from accel import set_accelerator
    from tests.support.first_release import first_release_module

    class Older(first_release_module().BoardAccelerator):  # type: ignore[name-defined,misc]
        fork_rng = None
        reset_accumulated_memory_stats = None

    ported = _ported(
        """
        import torch
        torch.cuda.set_device('cuda:1')
        with torch.cuda.device(0):
            inside = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(1)
        after = torch.cuda.current_device()
        """
    )
    board = Older()
    set_accelerator(board)
    try:
        namespace: dict[str, object] = {}
        exec(compile(ported, "<ported>", "exec"), namespace)
    finally:
        accel.reset_accelerator()
    assert (namespace["inside"], namespace["after"]) == (0, 1)
    properties = namespace["props"]
    assert isinstance(properties, DeviceProperties)
    assert properties.total_memory == board.total_memory(1)


def test_ddp_device_ids_and_output_device_become_device_generic() -> None:
    result = port_source(
        textwrap.dedent(
            """
            from accel import get_accelerator
            from torch.nn.parallel import DistributedDataParallel as DDP
            import torch
            a = DDP(model, device_ids=[rank], output_device=rank)
            b = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
            c = DDP(model, device_ids=[0, 1])
            d = DDP(model, device_ids=[rank] if on_gpu else None)
            """
        )
    )
    ported = result.source
    assert (
        "a = DDP(model, device_ids=ddp_device_ids(rank), output_device=ddp_output_device(rank))"
        in ported
    )
    assert "DistributedDataParallel(model, device_ids=ddp_device_ids(rank))" in ported
    assert "c = DDP(model, device_ids=[0, 1])" in ported  # several devices: a person decides
    assert [f.line for f in result.findings if not f.rewritten] == [7]
    assert "d = DDP(model, device_ids=[rank] if on_gpu else None)" in ported  # already chooses
    # The names it needs are imported once, beside the import the module already had.
    assert ported.count("from accel import") == 2
    assert "from accel import ddp_device_ids, ddp_output_device\n" in ported
    # A second run changes nothing, and what is ported already, in either spelling, or
    # None stays as it is.
    again = port_source(ported)
    assert (again.source, [f for f in again.findings if f.rewritten]) == (ported, [])
    done = "import accel\ne = DDP(model, output_device=accel.ddp_output_device(rank))\n"
    done += "f = DDP(model, output_device=None)\n"
    assert port_source(done).source == done


def test_ddp_device_ids_are_none_on_the_cpu_and_a_list_on_accelerators() -> None:
    import accel
    from accel.backends.cpu import CPUAccelerator

    class NamedLikeAGPU(CPUAccelerator):  # DDP's rule reads only the device type
        def device_name(self, device_index: int | None = None) -> str:
            return "cuda" if device_index is None else f"cuda:{device_index}"

    cpu = CPUAccelerator()
    assert accel.ddp_device_ids(1, cpu) is None
    assert accel.ddp_output_device(1, cpu) is None
    gpu = NamedLikeAGPU()
    assert accel.ddp_device_ids(1, gpu) == [1]
    with pytest.raises(TypeError, match="device must be a non-negative int, got str"):
        accel.ddp_device_ids("1", gpu)  # type: ignore[arg-type]
    assert accel.ddp_output_device(1, gpu) == 1


def test_init_process_groups_device_id_becomes_device_generic() -> None:
    result = port_source(
        textwrap.dedent(
            """
            import os
            import torch
            import torch.distributed as dist
            rank = int(os.environ["LOCAL_RANK"])
            device = torch.device(f"cuda:{rank}")
            dist.init_process_group(backend="nccl", device_id=device)
            dist.init_process_group("nccl", device_id="cuda:0")
            dist.init_process_group("nccl", device_id=None)
            """
        )
    )
    lines = result.source.splitlines()
    assert "device = torch.device(get_accelerator().device_name(rank))" in lines
    assert (
        "dist.init_process_group(backend=get_accelerator().communication_backend_name(), "
        "device_id=process_group_device_id(device))"
    ) in lines
    assert (
        "dist.init_process_group(get_accelerator().communication_backend_name(), "
        "device_id=process_group_device_id(get_accelerator().device_name(0)))"
    ) in lines
    assert "device_id=None)" in lines[-1]  # already generic
    assert "from accel import get_accelerator, process_group_device_id" in lines
    assert port_source(result.source).findings == []


def test_process_group_device_id_is_none_on_the_cpu_and_the_device_elsewhere() -> None:
    import accel
    from accel.backends.cpu import CPUAccelerator

    class NamedLikeAGPU(CPUAccelerator):  # the rule reads only the device type
        def device_name(self, device_index: int | None = None) -> str:
            return "cuda" if device_index is None else f"cuda:{device_index}"

    cpu = CPUAccelerator()
    assert accel.process_group_device_id(torch.device("cpu"), cpu) is None
    assert accel.process_group_device_id(1, cpu) is None
    gpu = NamedLikeAGPU()
    assert accel.process_group_device_id("cuda:1", gpu) == torch.device("cuda", 1)
    assert accel.process_group_device_id(torch.device("cuda", 2), gpu) == torch.device("cuda", 2)
    with pytest.raises(ValueError, match=r"device must name a cuda device .*, got 'npu:0'"):
        accel.process_group_device_id("npu:0", gpu)


def test_a_device_type_keyword_names_the_accelerators_type() -> None:
    ported = _ported(
        """
        import torch
        with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
            pass
        with torch.autocast(device_type=0):
            pass
        """
    )
    assert "torch.amp.autocast(device_type=get_accelerator().device_name(), dtype" in ported
    assert "torch.autocast(device_type=0)" in ported  # not a device: an int is no device type


@pytest.mark.usefixtures("fresh_selection")
def test_a_string_naming_the_current_cuda_device_becomes_the_current_devices_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the call inside was rewritten: f"cuda:{get_accelerator().current_device()}"
    # named a CUDA device on every accelerator.
    monkeypatch.setenv("ACCEL_BACKEND", "cpu")
    result = port_source(
        textwrap.dedent(
            """
            import torch
            whole = f"cuda:{torch.cuda.current_device()}"
            inside = f"running on cuda:{torch.cuda.current_device()}, rank {0}"
            percent = "cuda:%d" % torch.cuda.current_device()
            formatted = "cuda:{}".format(torch.cuda.current_device())
            added = "cuda:" + str(torch.cuda.current_device())
            placed = torch.ones(1, device=f"cuda:{torch.cuda.current_device()}")
            padded = lambda: f"cuda:{torch.cuda.current_device():02d}"
            """
        )
    )
    lines = result.source.splitlines()
    for expected in (
        "whole = get_accelerator().current_device_name()",
        'inside = f"running on {get_accelerator().current_device_name()}, rank {0}"',
        "percent = get_accelerator().current_device_name()",
        "formatted = get_accelerator().current_device_name()",
        "added = get_accelerator().current_device_name()",
        "placed = torch.ones(1, device=get_accelerator().current_device_name())",
        'padded = lambda: f"cuda:{torch.cuda.current_device():02d}"',  # a person decides
    ):
        assert expected in lines, expected
    assert [(f.line, f.rule) for f in result.findings] == [
        (3, "device-string"), (4, "device-string"), (5, "device-string"), (6, "device-string"),
        (7, "device-string"), (8, "device-string"), (9, "manual"),
    ]  # fmt: skip
    namespace: dict[str, object] = {}
    exec(compile(result.source, "ported.py", "exec"), namespace)
    assert [namespace[n] for n in ("whole", "percent", "formatted", "added")] == ["cpu"] * 4
    assert namespace["inside"] == "running on cpu, rank 0"
    assert port_source(result.source).source == result.source


def _manual_lines(result_source: str) -> list[int]:
    return [f.line for f in port_source(textwrap.dedent(result_source)).findings if not f.rewritten]


def test_cuda_and_an_index_become_a_device_name_only_for_an_int() -> None:
    # device_name() takes an int: the str of os.environ["LOCAL_RANK"] failed on every
    # backend, and "cuda:{}".format(gpu) was left alone unreported.
    source = """
        import os
        import torch
        def place(x, gpu: int, other):
            a = x.to(f"cuda:{gpu}")
            b = x.to(f"cuda:{os.environ['LOCAL_RANK']}")
            c = torch.device('cuda:{}'.format(other))
            d = torch.load("f.pt", map_location="cuda:%d" % gpu)
            e = x.to("cuda:" + str(other))
            return a, b, c, d, e
        """
    ported = _ported(source)
    assert "a = x.to(get_accelerator().device_name(gpu))" in ported
    assert "b = x.to(f\"cuda:{os.environ['LOCAL_RANK']}\")" in ported
    assert "c = torch.device('cuda:{}'.format(other))" in ported
    assert "map_location=get_accelerator().device_name(gpu))" in ported
    assert 'e = x.to("cuda:" + str(other))' in ported
    assert _manual_lines(source) == [6, 7, 9]  # b, c, e: reported with their positions


def test_a_backend_chosen_by_cuda_availability_is_the_accelerators() -> None:
    # Ported, the test is true on the CPU backend too, and nccl does not exist there.
    ported = _ported(
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        backend = "gloo" if not torch.cuda.is_available() else "nccl"
        dist.init_process_group(backend)
        """
    )
    assert "init_process_group(backend=get_accelerator().communication_backend_name())" in ported
    assert "backend = get_accelerator().communication_backend_name()" in ported


def test_cuda_methods_arguments_become_keywords_every_to_takes() -> None:
    result = port_source(
        textwrap.dedent(
            """
            import torch
            def move(x, m):
                a = x.cuda(device=1)
                b = x.cuda(0, True)
                c = x.cuda(non_blocking=True)
                return a, b, c, m.cuda()
            state = torch.load("f.pt", map_location=lambda storage, loc: storage.cuda())
            """
        )
    )
    ported = result.source
    assert "a = x.to(device=get_accelerator().device_name(1))" in ported
    assert "b = x.to(device=get_accelerator().device_name(0), non_blocking=True)" in ported
    assert "c = x.to(device=get_accelerator().device_name(), non_blocking=True)" in ported
    assert "m.to(device=get_accelerator().device_name())" in ported
    assert port_source(ported).source == ported  # a second run changes nothing
    # A storage's to() takes the device by keyword only: the lambda runs on the CPU now.
    lambda_line = next(line for line in ported.splitlines() if "lambda" in line)
    namespace: dict[str, object] = {"get_accelerator": get_accelerator}
    location = eval(lambda_line.split("map_location=", 1)[1].removesuffix(")"), namespace)
    assert callable(location)
    moved = location(torch.ones(2).untyped_storage(), "cuda:0")
    assert isinstance(moved, torch.UntypedStorage)


def test_what_only_some_accelerators_have_is_reported_not_rewritten() -> None:
    source = """
        import torch
        import torch.cuda.nvtx as nvtx
        from torch.nn.parallel import DistributedDataParallel as DDP
        start = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(torch.cuda.Stream()):
            pass
        model = DDP(model, [local_rank], local_rank)
        if x.is_cuda:
            y = kernel(x)
        free, total = torch.cuda.mem_get_info()
        """
    result = port_source(textwrap.dedent(source))
    ported = result.source
    for unchanged in (
        "start = torch.cuda.Event(enable_timing=True)",
        "with torch.cuda.stream(torch.cuda.Stream()):",
        "model = DDP(model, [local_rank], local_rank)",
        "if x.is_cuda:",
    ):
        assert unchanged in ported, unchanged
    assert "free, total = get_memory_info()" in ported
    manual = {f.line: f.message for f in result.findings if not f.rewritten}
    assert sorted(manual) == [3, 5, 6, 8, 9]
    assert "StreamAPI" in manual[5]
    assert "StreamAPI" in manual[6]
    assert "binds a CUDA-only module" in manual[3]
    assert "by position" in manual[8]
    assert "on_accelerator" in manual[9]


def test_every_other_way_of_naming_a_cuda_device_is_reported_once() -> None:
    # Re-parsing an index cut out of its brackets failed the whole file; these spellings
    # were left alone unreported; a rewritten choice kept a finding for its old string.
    source = """
        import os
        import torch
        def f(x, r, i: int, ok):
            print("cuda:{}".format(r  # the rank
                  + 1))
            a = x.to(f"cuda:{r!s}")
            b = x.to("cuda:" + os.environ["LOCAL_RANK"])
            c = x.to("cuda:%d" % (r,))
            d = x.to("cuda:" f"{r}")
            e = x.to("cpu" if not ok else f"cuda:{i}")
            return a, b, c, d, e
        """
    result = port_source(textwrap.dedent(source))
    assert 'x.to("cpu" if not ok else get_accelerator().device_name(i))' in result.source
    manual = [f.line for f in result.findings if not f.rewritten]
    assert manual == [7, 8, 9, 10]
    assert port_source(result.source).source == result.source


def test_only_a_backend_chosen_by_cuda_availability_becomes_the_accelerators() -> None:
    source = """
        import torch.distributed as dist
        dist.init_process_group("gloo" if args.cpu else "nccl")
        dist.init_process_group(backend="nccl" if args.backend is None else args.backend)
        """
    result = port_source(textwrap.dedent(source))
    assert result.source == textwrap.dedent(source)  # the user's own choices stay


def test_cuda_keeps_its_comments_and_refuses_a_device_it_cannot_prove_is_an_index() -> None:
    source = """
        import torch
        def move(x, name, i: int):
            y = x.cuda(
                i,
                non_blocking=True,  # overlap with compute
            )
            return y, x.cuda(name), x.cuda("cuda:1")
        """
    result = port_source(textwrap.dedent(source))
    assert "device=get_accelerator().device_name(i)," in result.source
    assert "non_blocking=True,  # overlap with compute" in result.source
    assert "x.cuda(name)" in result.source  # a str or torch.device: device_name() refuses it
    assert "x.to(device=get_accelerator().device_name(1))" in result.source
    assert [f.line for f in result.findings if not f.rewritten] == [8]


def test_more_device_positions_take_the_accelerators_device() -> None:
    ported = _ported(
        """
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        torch.set_default_device("cuda")
        loader = torch.utils.data.DataLoader(data, pin_memory=True, pin_memory_device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pass
        scaler = torch.amp.GradScaler("cuda")
        model = FSDP(model, device_id=torch.cuda.current_device())
        """
    )
    for expected in (
        "torch.set_default_device(get_accelerator().device_name())",
        "pin_memory_device=get_accelerator().device_name())",
        "with torch.autocast(get_accelerator().device_name(), dtype=torch.bfloat16):",
        "scaler = torch.amp.GradScaler(get_accelerator().device_name())",
        "model = FSDP(model, device_id=get_accelerator().current_device_name())",
    ):
        assert expected in ported, expected


def test_a_comparison_with_cuda_is_reported() -> None:
    source = """
        import torch
        if x.device.type == "cuda":
            torch.cuda.synchronize()
        on_gpu = "cuda" != device.type
        label = name == "cpu"
        """
    result = port_source(textwrap.dedent(source))
    assert 'if x.device.type == "cuda":' in result.source  # left for a person
    assert [f.line for f in result.findings if not f.rewritten] == [3, 5]


def test_a_torch_cuda_function_referenced_not_called_is_reported() -> None:
    source = """
        import torch
        ok = torch.cuda.is_available
        if isinstance(s, torch.cuda.Stream):
            torch.cuda.synchronize()
        x = torch.load("f.pt", map_location={"cuda:0": "cpu"})
        """
    result = port_source(textwrap.dedent(source))
    assert "ok = torch.cuda.is_available\n" in result.source
    manual = {f.line: f.message for f in result.findings if not f.rewritten}
    assert sorted(manual) == [3, 4, 6]
    assert "referenced, not called" in manual[3]
    assert "StreamAPI" in manual[4]


def test_a_torch_device_argument_becomes_an_index_or_is_reported() -> None:
    # The arguments went over unchanged: torch.cuda.synchronize(device) with a torch.device
    # and synchronize(device=i) failed in the ported code on every backend, and so did
    # is_bf16_supported(including_emulation=False).
    source = """
        import torch
        def measure(device, rank: int):
            torch.cuda.synchronize(device)
            a = torch.cuda.max_memory_allocated(device)
            torch.cuda.synchronize(rank)
            torch.cuda.synchronize(device=rank)
            torch.cuda.synchronize("cuda")
            torch.cuda.synchronize(None)
            b = torch.cuda.memory_allocated("cuda:0")
            c = torch.cuda.is_bf16_supported(including_emulation=False)
            d = torch.cuda.is_bf16_supported()
            state = torch.cuda.get_rng_state()
            torch.cuda.set_rng_state(new_state=state, device=rank)
            return a, b, c, d
        """
    ported = _ported(source)
    assert "torch.cuda.synchronize(device)" in ported
    assert "a = torch.cuda.max_memory_allocated(device)" in ported
    assert "get_accelerator().synchronize(rank)" in ported
    assert "get_accelerator().synchronize(device_index=rank)" in ported
    assert "get_accelerator().synchronize()\n" in ported
    assert "get_accelerator().synchronize(None)" in ported
    assert "b = get_accelerator().memory_allocated(0)" in ported
    assert "c = torch.cuda.is_bf16_supported(including_emulation=False)" in ported
    assert "d = get_accelerator().is_bf16_supported()" in ported
    assert "get_accelerator().set_rng_state(new_state=state, device_index=rank)" in ported
    assert _manual_lines(source) == [4, 5, 11]
    starred = port_source(
        "import torch\ntorch.cuda.synchronize(*where)\ntorch.cuda.manual_seed(*seed)\n"
    )
    assert "torch.cuda.synchronize(*where)" in starred.source  # a device may be in there
    assert "get_accelerator().manual_seed(*seed)" in starred.source  # no device to convert
    (reported,) = [f for f in starred.findings if not f.rewritten]
    assert reported.line == 2
    assert "accel port cannot see the arguments" in reported.message
    # What was rewritten runs on the CPU backend.
    runnable = "\n".join(
        line for line in ported.splitlines()
        if "torch.cuda" not in line and "return" not in line and "def " not in line
    )  # fmt: skip
    exec(textwrap.dedent(runnable.replace("\n    ", "\n")), {"rank": 0})


def test_nvtx_calls_are_rewritten_once_and_the_rest_of_nvtx_reported() -> None:
    # Each ported range_push/pop was also reported as "torch.cuda.nvtx is referenced, not
    # called: use get_accelerator().nvtx" (no such member), so --strict could never pass;
    # torch.cuda.nvtx.range(...) was left unreported.
    source = """
        import torch
        torch.cuda.nvtx.range_push("step")
        torch.cuda.nvtx.range_pop()
        with torch.cuda.nvtx.range("x"):
            pass
        push = torch.cuda.nvtx.range_push
        """
    ported = _ported(source)
    assert 'get_accelerator().range_push("step")' in ported
    assert "get_accelerator().range_pop()" in ported
    assert _manual_lines(source) == [5, 7]


def test_a_name_that_merely_contains_cuda_is_not_a_cuda_device() -> None:
    # use_cuda in a ported device position was reported as naming a CUDA device, so the
    # ported mnist example could never pass --check --strict.
    source = """
        import torch
        use_cuda = torch.cuda.is_available()
        device = torch.device("cuda" if use_cuda else "cpu")
        a = torch.zeros(1, device="cpu" if not use_cuda else "cuda:0")
        """
    ported = _ported(source)
    assert 'torch.device(get_accelerator().device_name() if use_cuda else "cpu")' in ported
    assert _manual_lines(source) == []
    assert _manual_lines(ported) == []


def test_an_availability_guard_stays_while_its_branch_is_cudas_own() -> None:
    # Ported, `if torch.cuda.is_available(): model.cuda(args.gpu)` ran the CUDA-only branch
    # on the CPU backend ("Torch not compiled with CUDA enabled").
    source = """
        import torch
        def place(model, x, gpu):
            if torch.cuda.is_available():
                model.cuda(gpu)
            if not torch.cuda.is_available():
                pass
            else:
                x = x.cuda(gpu, non_blocking=True)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return model, x
        """
    ported = _ported(source)
    assert ported.count("if torch.cuda.is_available():") == 1
    assert "if not torch.cuda.is_available():" in ported
    assert "if get_accelerator().is_available():\n        get_accelerator().synchronize()" in ported
    assert _manual_lines(source) == [4, 5, 6, 9]


def test_a_choices_guard_stays_while_its_branch_names_cuda() -> None:
    # `"cuda" if torch.cuda.is_available() else "cpu"` where no rule proves a device is
    # meant: the guard was ported and "cuda" kept, so the CPU backend chose "cuda" and the
    # script failed ("Torch not compiled with CUDA enabled").
    source = """
        import torch
        from mylib import build
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = build(device)
        class Args:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        def main(device: str = "cuda" if torch.cuda.is_available() else "cpu"):
            return build(device)
        x = torch.zeros(3, device="cuda" if torch.cuda.is_available() else "cpu")
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        """
    ported = _ported(source)
    assert ported.count('"cuda" if torch.cuda.is_available() else "cpu"') == 3
    assert "device=get_accelerator().device_name() if get_accelerator().is_available()" in ported
    assert "n = get_accelerator().device_count() if get_accelerator().is_available() else 0" in (
        ported
    )
    assert _manual_lines(source) == [4, 7, 8]


def test_a_choice_rewritten_whole_leaves_no_guard_to_another() -> None:
    # Choices were remembered by id() alone: a choice a device rule replaced was freed, a
    # later choice took its id, and that one had a guard "put back" (line 4, already
    # ported by hand) while line 3 was reported for a guard that was ported.
    source = """
        import torch
        from accel import get_accelerator
        x = torch.zeros(2, device="cuda" if torch.cuda.is_available() else "cpu")
        y = "cuda:1" if get_accelerator().is_available() else "cpu"
        z = "cuda" if use_gpu else "cpu"
        """
    ported = _ported(source)
    assert 'y = "cuda:1" if get_accelerator().is_available() else "cpu"' in ported
    assert "torch.cuda.is_available()" not in ported
    assert 4 not in _manual_lines(source)


def test_an_int_written_in_a_device_position_is_a_device_index() -> None:
    source = """
        import os
        import torch
        rank = int(os.environ["RANK"])
        x = torch.ones(2).to(int(os.environ["LOCAL_RANK"]))
        y = torch.ones(2, device=rank % torch.cuda.device_count())
        m = torch.nn.Linear(2, 2).cuda(int(os.environ["LOCAL_RANK"]))
        s = x.cuda("cuda:%d" % torch.cuda.device_count())
        """
    ported = _ported(source)
    # A string's % formatting is not an index: reported, not given to device_name.
    assert 's = x.cuda("cuda:%d" % get_accelerator().device_count())' in ported
    assert 'x = torch.ones(2).to(get_accelerator().device_name(int(os.environ["LOCAL_RANK"])))' in (
        ported
    )
    assert (
        "y = torch.ones(2, device=get_accelerator().device_name(rank % "
        "get_accelerator().device_count()))"
    ) in ported
    assert 'device_name(int(os.environ["LOCAL_RANK"])))' in ported.splitlines()[-2]
    assert _manual_lines(source) == [8]


def test_an_int_attribute_is_one_classs_not_every_classs() -> None:
    # self.device = local_rank in one class made another class's self.device (a property
    # returning torch.device("cpu"), or a class attribute) an int: it became
    # device_name(self.device), a TypeError.
    source = """
        import torch
        class RankWorker:
            def __init__(self, local_rank: int):
                self.device = local_rank
            def load(self, x):
                return x.to(self.device)
        class Evaluator:
            @property
            def device(self):
                return torch.device("cpu")
            def run(self, x):
                return x.to(self.device)
        class Config:
            device = "cpu"
            def __init__(self):
                self.device = 0
            def place(self, x):
                return x.to(self.device)
        """
    ported = _ported(source)
    assert "return x.to(get_accelerator().device_name(self.device))" in ported
    assert ported.count("return x.to(self.device)") == 2
    namespace: dict[str, object] = {}
    exec(ported, namespace)
    evaluator = namespace["Evaluator"]
    assert callable(evaluator)
    assert torch.equal(evaluator().run(torch.ones(2)), torch.ones(2))


def test_a_cuda_string_no_rule_takes_is_reported() -> None:
    # Left as they were with no finding, so --check --strict passed on code that still
    # failed on the CPU ("Torch not compiled with CUDA enabled").
    source = """
        import torch
        from dataclasses import dataclass
        def make_batch(n, device="cuda"):
            return torch.zeros(n, device=device)
        @dataclass
        class Config:
            device: str = "cuda:0"
        class Model:
            def __init__(self):
                self.device = "cuda"
        devices = [torch.zeros(1, device=d) for d in ["cuda", "cpu"]]
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
        x = torch.ones(2, device="cuda")
        if x.device.type == "cuda":
            pass
        """
    result = port_source(textwrap.dedent(source))
    manual = {(f.line, f.message.split(" is ")[0]) for f in result.findings if not f.rewritten}
    assert manual == {
        (4, "'cuda'"), (8, "'cuda:0'"), (11, "'cuda'"), (12, "'cuda'"),
        (13, "'torch.cuda.FloatTensor'"), (15, "a comparison with 'cuda'"),
    }  # fmt: skip
    assert "x = torch.ones(2, device=get_accelerator().device_name())" in result.source


def test_comments_inside_a_rewritten_calls_parentheses_are_kept() -> None:
    # The call was built anew: the comments after its "(" were lost.
    source = """
        import torch
        torch.cuda.manual_seed_all(  # seed every GPU
            1234,
        )
        torch.cuda.set_device(  # the local GPU
            0
        )
        torch.cuda.nvtx.range_push(  # a range
            "x")
        """
    ported = _ported(source)
    for comment in ("# seed every GPU", "# the local GPU", "# a range"):
        assert comment in ported
    assert "get_accelerator().manual_seed_all(  # seed every GPU" in ported


def test_a_kept_guard_keeps_the_rest_of_its_test_ported_and_log_text_is_no_cuda_code() -> None:
    # The whole test went back, its other rewrites still reported and imported; a log line
    # naming cuda kept a guard; a closing quote before `cuda_dev` read as a CUDA string.
    source = """
        import torch
        def f(model, args, cuda_dev, pick):
            if torch.cuda.is_available() and torch.cuda.device_count() > 1:
                model.cuda(args.gpu)
            if torch.cuda.is_available():
                print("training on cuda")
            return torch.zeros(1, device=pick("a", cuda_dev))
        """
    ported = _ported(source)
    assert "if torch.cuda.is_available() and get_accelerator().device_count() > 1:" in ported
    assert 'if get_accelerator().is_available():\n        print("training on cuda")' in ported
    assert _manual_lines(source) == [4, 5]


def test_a_cuda_argument_a_rule_removed_is_not_reported_as_left() -> None:
    # On a line of its own it was reported as "'cuda' is left as it is", so --strict failed.
    source = """
        import torch
        torch.cuda.synchronize(
            "cuda",
        )
        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state, "cuda")
        """
    ported = _ported(source)
    assert "get_accelerator().set_rng_state(state)" in ported  # no comma left behind
    assert _manual_lines(source) == []


def test_a_ranks_device_index_modulo_the_device_count_is_an_int() -> None:
    # The DDP tutorial's `device_id = rank % torch.cuda.device_count()`, then
    # `.to(device_id)`: left as it was and unreported, the ported script failed on the CPU
    # ("Cannot access accelerator device when none is available").
    ported = _ported(
        """
        import torch
        def demo(rank, model):
            device_id = rank % torch.cuda.device_count()
            return model.to(device_id), torch.ones(2).to(device_id)
        """
    )
    assert "device_id = rank % get_accelerator().device_count()" in ported
    assert "model.to(get_accelerator().device_name(device_id))" in ported
    assert "torch.ones(2).to(get_accelerator().device_name(device_id))" in ported


def test_cudas_device_capability_is_pointed_at_the_properties() -> None:
    # It said "has no accel equivalent", though the properties hold CUDA's (major, minor).
    result = port_source("import torch\nmajor, minor = torch.cuda.get_device_capability()\n")
    (finding,) = [f for f in result.findings if not f.rewritten]
    assert "get_device_properties(i).compute_capability" in finding.message
