"""accel._entry_points gives importlib.metadata's answer without parsing every
distribution: in this environment, and in generated layouts of shadowed, renamed and
broken distributions on sys.path."""

from __future__ import annotations

import importlib.metadata
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accel import _entry_points

GROUPS = ("accel.backends", "accel.integrations")


def _described(entries: list[importlib.metadata.EntryPoint]) -> list[tuple[str, ...]]:
    described: list[tuple[str, ...]] = []
    for entry in entries:
        dist = entry.dist
        assert dist is not None, entry
        described.append((entry.name, entry.value, entry.group, dist.metadata["Name"]))
    return described


def _expected(group: str) -> list[tuple[str, ...]]:
    return _described(list(importlib.metadata.entry_points(group=group)))


@pytest.mark.parametrize("group", [*GROUPS, "console_scripts", "pytest11", "torch.backends"])
def test_this_environment(group: str) -> None:
    assert _described(_entry_points.entry_points(group)) == _expected(group)


# A generated layout: distributions in a few folders of sys.path, under names that
# normalise alike or not, some of them entry points, some not; plus the odd things a
# site-packages holds.
_NAMES = st.sampled_from(["plug", "Plug", "plug_in", "plug.in", "Plug-In", "other"])
_ENTRIES = st.dictionaries(
    st.sampled_from(GROUPS),
    st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["m:A", "m:B"]), max_size=2),
    max_size=2,
)
_DIST = st.tuples(
    _NAMES,
    st.sampled_from(["1.0", "2.0"]),
    st.sampled_from([".dist-info", ".egg-info", ".egg-info file"]),
    _ENTRIES,
)
_LAYOUT = st.lists(st.lists(_DIST, max_size=4), min_size=1, max_size=3)


def _write(folder: Path, dist: tuple[str, str, str, dict[str, dict[str, str]]]) -> None:
    name, version, kind, entries = dist
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    stem = f"{name.replace('-', '_')}-{version}"
    info = folder / f"{stem}{kind.removesuffix(' file')}"
    if info.exists():
        return  # the generated layout repeats a name
    if kind == ".egg-info file":  # distutils' PKG-INFO as a file: no entry points
        info.write_text(metadata)
        return
    info.mkdir()
    (info / ("METADATA" if kind == ".dist-info" else "PKG-INFO")).write_text(metadata)
    if entries:
        sections = [
            f"[{group}]\n" + "".join(f"{ep} = {target}\n" for ep, target in named.items())
            for group, named in entries.items()
        ]
        (info / "entry_points.txt").write_text("\n".join(sections))


@given(layout=_LAYOUT, missing=st.booleans())
def test_generated_layouts(
    layout: list[list[tuple[str, str, str, dict[str, dict[str, str]]]]], missing: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        paths = []
        for index, dists in enumerate(layout):
            folder = Path(tmp, f"site{index}")
            folder.mkdir()
            for dist in dists:
                _write(folder, dist)
            paths.append(str(folder))
        if missing:
            paths.insert(1, str(Path(tmp, "not-there")))
        patch.setattr("sys.path", paths)
        for group in GROUPS:
            assert _described(_entry_points.entry_points(group)) == _expected(group)


def test_the_current_directory_is_searched_for_an_empty_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, ("here", "1.0", ".dist-info", {"accel.backends": {"a": "m:A"}}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [""])
    assert _described(_entry_points.entry_points("accel.backends")) == [
        ("a", "m:A", "accel.backends", "here")
    ]
    assert _described(_entry_points.entry_points("accel.backends")) == _expected("accel.backends")


def test_the_group_named_elsewhere_in_the_file_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The text check only chooses which files to parse: a value that merely mentions the
    # group is parsed and left out.
    info = tmp_path / "decoy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: decoy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nx = accel.backends:main\n")
    monkeypatch.setattr("sys.path", [str(tmp_path)])
    assert _entry_points.entry_points("accel.backends") == []


@pytest.mark.parametrize("odd", ["zip", "upper-case suffix", "egg", "not a string"])
def test_what_only_importlib_metadata_reads_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str
) -> None:
    _write(tmp_path, ("plain", "1.0", ".dist-info", {"accel.backends": {"a": "m:A"}}))
    paths = [str(tmp_path)]
    if odd == "zip":
        archive = tmp_path / "zipped.zip"
        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
            zipped.writestr("zipped-1.0.dist-info/entry_points.txt", "[accel.backends]\nz = m:Z\n")
        paths.append(str(archive))
    elif odd == "upper-case suffix":
        info = tmp_path / "Shouting-1.0.DIST-INFO"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shouting\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[accel.backends]\ns = m:S\n")
    elif odd == "not a string":
        other = tmp_path / "other"
        other.mkdir()
        _write(other, ("other", "1.0", ".dist-info", {"accel.backends": {"o": "m:O"}}))
        paths.append(Path(other))  # type: ignore[arg-type]  # import ignores it
    else:
        egg = tmp_path / "old-1.0-py3.egg"
        (egg / "EGG-INFO").mkdir(parents=True)
        (egg / "EGG-INFO" / "PKG-INFO").write_text("Name: old\nVersion: 1.0\n")
        (egg / "EGG-INFO" / "entry_points.txt").write_text("[accel.backends]\no = m:O\n")
        paths.append(str(egg))
    monkeypatch.setattr("sys.path", paths)
    assert _entry_points._folders_naming("accel.backends") is None
    found = _described(_entry_points.entry_points("accel.backends"))
    assert found == _expected("accel.backends")
    assert len(found) == 2  # importlib.metadata found the odd one too
