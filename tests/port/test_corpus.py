"""The port corpus: realistic GPU training scripts, ported, then trained on the CPU.

tests/port/corpus/ holds scripts written for this test in the ways people write device
code (module-level `device = 'cuda'`, f'cuda:{rank}', conditional devices, the 'cuda' in
device idiom, string set_device, torch.cuda.amp, `backend = 'nccl'`, import aliases,
integer GPU ids, `DDP(device_ids=[i])`, `map_location=0`, FSDP2 with
`init_process_group(device_id=device)`, `to_empty(device="cuda")`, `autocast(device_type=
"cuda")` and `get_device_properties(device)`). The unported scripts fail on a CPU-only
torch, at their first CUDA call and with torch's error for it; ported, they must train
alone, as two DDP ranks under `accel run`, on two "nodes" (two launchers meeting at a c10d
rendezvous on this host) and from their own snapshot, with the same results a person would
check.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel.cli import main
from accel.port.rewrite import port_source
from tests.support.ports import free_port

# Every test here starts other processes (ranks, launchers, CLIs): `-m "not slow"`
# leaves them out for a quick run.
pytestmark = pytest.mark.slow


CORPUS = Path(__file__).parent / "corpus"
SCRIPTS = sorted(CORPUS.glob("*.py"))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {
        "ACCEL_BACKEND": "cpu"  # a GPU machine runs the CPU path too
    }


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def _two_ranks(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``accel run --standalone --nproc-per-node 2 ARGS``."""
    return _python("-m", "accel", "run", "--standalone", "--nproc-per-node", "2", *args, cwd=cwd)


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    for script in SCRIPTS:
        shutil.copy(script, directory / script.name)
    assert main(["port", "--check", str(directory)]) == 1  # unported: something to rewrite
    assert main(["port", str(directory)]) == 0
    assert main(["port", "--check", str(directory)]) == 0  # ported: nothing left to rewrite
    return directory


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_porting_is_idempotent_and_changes_only_the_lines_it_reports(script: Path) -> None:
    source = script.read_text()
    first = port_source(source)
    assert port_source(first.source).source == first.source
    reported = {f.line for f in first.findings if f.rewritten}
    before, after = source.splitlines(), first.source.splitlines()
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "insert":  # the import: one line, or one name per line in parentheses
            inserted = after[b0:b1]
            assert inserted[0].startswith("from accel import ")
            assert len(inserted) == 1 or (inserted[0].endswith("(") and inserted[-1] == ")")
            assert any("get_accelerator" in line for line in inserted)
        elif tag != "equal":
            assert set(range(a0 + 1, a1 + 1)) <= reported, (tag, before[a0:a1], after[b0:b1])
    comments = [line.split("#", 1)[1] for line in before if "#" in line]
    assert all(comment in first.source for comment in comments)  # comments survive


# What torch raises where a script asks for CUDA it does not have: a CPU-only build (the
# lazy init's assertion, or set_device's missing binding), or a CUDA build on a machine
# without a GPU or driver.
_NO_CUDA = re.compile(
    r"^(AssertionError: Torch not compiled with CUDA enabled"
    r"|AttributeError: module 'torch\._C' has no attribute '_cuda_setDevice'"
    r"|RuntimeError: (No CUDA GPUs are available|Found no NVIDIA driver on your system"
    r"|CUDA error: no CUDA-capable device is detected))",
    re.MULTILINE,
)


def _assert_fails_for_want_of_cuda(
    result: subprocess.CompletedProcess[str], script: str, statement: str
) -> None:
    """``result`` failed on ``statement``, its deepest line of ``script``, with torch's
    error for a missing CUDA: any other crash is a failure of the test."""
    assert result.returncode != 0
    frames = re.findall(rf'File "[^"]*{re.escape(script)}", line \d+, in \S+\n(.*)', result.stderr)
    assert frames, result.stderr[-3000:]
    assert frames[-1].strip() == statement, result.stderr[-3000:]
    assert _NO_CUDA.search(result.stderr), result.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the unported scripts run on a GPU")
def test_the_unported_script_fails_on_the_cpu(tmp_path: Path) -> None:
    result = _python(str(CORPUS / "gpt_train.py"), str(tmp_path / "out.json"), cwd=tmp_path)
    _assert_fails_for_want_of_cuda(result, "gpt_train.py", "model = TinyLM(len(chars)).to(device)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the unported scripts run on a GPU")
def test_the_unported_alias_script_fails_on_the_cpu(tmp_path: Path) -> None:
    result = _python(str(CORPUS / "aliases_and_amp.py"), str(tmp_path / "a.json"), cwd=tmp_path)
    _assert_fails_for_want_of_cuda(
        result, "aliases_and_amp.py", "model = torch.nn.Linear(4, 1).cuda()"
    )


def test_the_ported_gpt_script_trains_on_the_cpu(ported: Path) -> None:
    result = _python("gpt_train.py", "single.json", cwd=ported)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((ported / "single.json.rank0").read_text())
    assert (report["device"], report["device_type"], report["world"]) == ("cpu", "cpu", 1)
    losses = report["losses"]
    assert losses[-1] < losses[0] / 2  # it learned


def test_the_ported_gpt_script_trains_as_two_ddp_ranks(ported: Path) -> None:
    result = _two_ranks("gpt_train.py", "ddp.json", cwd=ported)
    errors = [line for line in result.stderr.splitlines() if "Error" in line or "error" in line]
    assert result.returncode == 0, "\n".join(errors[-30:])
    reports = [json.loads((ported / f"ddp.json.rank{r}").read_text()) for r in (0, 1)]
    assert [r["world"] for r in reports] == [2, 2]
    # Different data on each rank, gradients averaged by DDP: identical replicas.
    assert reports[0]["checksum"] == reports[1]["checksum"]
    assert reports[0]["losses"] != reports[1]["losses"]
    for report in reports:
        assert report["losses"][-1] < report["losses"][0] / 2


def test_the_ported_alias_script_computes_the_regression(ported: Path) -> None:
    result = _python("aliases_and_amp.py", "alias.json", cwd=ported)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((ported / "alias.json").read_text())
    assert report["weights"] == pytest.approx([1.0, -2.0, 0.5, 3.0], abs=1e-4)
    assert report["bias"] == pytest.approx(0.1, abs=1e-4)
    assert report["loss"] < 1e-8
    assert report["on_accelerator"] is False  # x.is_cuda is reported, not rewritten
    assert report["round_trip"] is True
    assert report["allocated"] is True


def _ddp_snapshot_reports(directory: Path, out: str, ranks: int) -> list[dict[str, object]]:
    return [json.loads((directory / f"{out}.rank{r}").read_text()) for r in range(ranks)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the unported scripts run on a GPU")
def test_the_unported_snapshot_script_fails_on_the_cpu(tmp_path: Path) -> None:
    result = _python(str(CORPUS / "ddp_snapshot.py"), "1", "s.pt", "o.json", cwd=tmp_path)
    _assert_fails_for_want_of_cuda(result, "ddp_snapshot.py", "torch.cuda.set_device(local_rank)")


def test_the_ported_snapshot_script_trains_alone_and_resumes_from_its_snapshot(
    ported: Path, tmp_path: Path
) -> None:
    snapshot = str(tmp_path / "alone.pt")
    first = _python("ddp_snapshot.py", "3", snapshot, str(tmp_path / "a.json"), cwd=ported)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _python("ddp_snapshot.py", "10", snapshot, str(tmp_path / "b.json"), cwd=ported)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [before] = _ddp_snapshot_reports(tmp_path, "a.json", 1)
    [after] = _ddp_snapshot_reports(tmp_path, "b.json", 1)
    assert (before["started_at"], after["started_at"], before["device"]) == (0, 3, "cpu")
    losses, earlier = after["losses"], before["losses"]
    assert isinstance(losses, list)
    assert isinstance(earlier, list)
    assert len(losses) == 7  # epochs 3..9 only
    assert losses[0] < earlier[-1]  # it went on from where the snapshot was
    assert after["weights"] == pytest.approx([1.5, -2.0, 0.25, 3.0], abs=1e-2)


def test_the_ported_snapshot_script_trains_as_two_ddp_ranks(ported: Path, tmp_path: Path) -> None:
    result = _two_ranks(
        "ddp_snapshot.py", "4", str(tmp_path / "s.pt"), str(tmp_path / "d.json"), cwd=ported
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = _ddp_snapshot_reports(tmp_path, "d.json", 2)
    assert [r["world"] for r in reports] == [2, 2]
    assert reports[0]["weights"] == reports[1]["weights"]  # DDP kept the replicas equal
    assert reports[0]["losses"] != reports[1]["losses"]  # on different shards


def test_the_ported_snapshot_script_trains_on_two_nodes(ported: Path, tmp_path: Path) -> None:
    # Two launchers, one rank each, meeting at a c10d rendezvous: two nodes on one host.
    endpoint = f"127.0.0.1:{free_port()}"
    script = ["ddp_snapshot.py", "4", str(tmp_path / "n.pt"), str(tmp_path / "n.json")]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "corpus"]
    command = [sys.executable, "-m", "accel", "run", "--nnodes", "2", "--nproc-per-node", "1"]
    launchers = [
        subprocess.Popen(
            [*command, *rendezvous, *script],
            cwd=ported,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [launcher.communicate(timeout=300)[1] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs[0][-2000:]
    reports = _ddp_snapshot_reports(tmp_path, "n.json", 2)
    assert [r["world"] for r in reports] == [2, 2]
    assert reports[0]["weights"] == reports[1]["weights"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the unported scripts run on a GPU")
def test_the_unported_fsdp2_script_fails_on_the_cpu(tmp_path: Path) -> None:
    script = str(CORPUS / "fsdp2_checkpoint.py")
    launch = ("-m", "accel", "run", "--standalone", "--nproc-per-node", "1")
    result = _python(*launch, script, "2", "c.pt", "o.json", cwd=tmp_path)
    _assert_fails_for_want_of_cuda(result, "fsdp2_checkpoint.py", "torch.cuda.set_device(device)")


def test_the_ported_fsdp2_script_trains_as_two_ranks_and_saves_a_full_checkpoint(
    ported: Path, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "full.pt"
    result = _two_ranks(
        "fsdp2_checkpoint.py", "30", str(checkpoint), str(tmp_path / "f.json"), cwd=ported
    )
    errors = [line for line in result.stderr.splitlines() if "Error" in line]
    assert result.returncode == 0, "\n".join(errors[-30:])
    reports = [json.loads((tmp_path / f"f.json.rank{r}").read_text()) for r in (0, 1)]
    assert [r["world"] for r in reports] == [2, 2]
    assert [r["device"] for r in reports] == ["cpu", "cpu"]
    assert reports[0]["checksum"] == reports[1]["checksum"]  # one model, gathered whole
    for report in reports:
        assert report["losses"][-1] < report["losses"][0] / 2
    saved = torch.load(checkpoint, weights_only=True)
    assert sum(float(t.double().sum()) for t in saved.values()) == reports[0]["checksum"]
    assert saved["embed.weight"].shape == (64, 32)  # the full tensor, not a shard
