"""sim.files: safe reading (caps, encodings) and atomic writing (whole file or old file)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import files
from sim.errors import ConfigError
from sim.files import (
    check_output_path,
    dumps_json,
    load_shipped_yaml,
    load_shipped_yaml_entry,
    load_yaml,
    read_text,
    write_atomic,
)

ROOT = Path(__file__).resolve().parents[1]
#: Folders of YAML shipped with clustersim (package data read by load_shipped_yaml).
SHIPPED = ("sim", "topologies", "scenarios", "calibrate/profiles")


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk during the replace: the old contents stay, the temporary file is removed."""
    target = tmp_path / "out.json"
    target.write_text("old\n")
    monkeypatch.setattr(os, "replace", _disk_full)
    with pytest.raises(ConfigError, match=r"cannot write .No space left on device"):
        write_atomic(target, "new\n", "--out")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_measurement_files_are_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``calibrate`` outputs go through the same helper: a full disk truncates nothing."""
    from calibrate.measurements import Measurements, Meta, save_measurements

    target = tmp_path / "m.json"
    target.write_text("previous run\n")
    monkeypatch.setattr(os, "replace", _disk_full)
    with pytest.raises(ConfigError, match="No space left"):
        save_measurements(Measurements("compute", Meta(source="x", created="t")), target)
    assert target.read_text() == "previous run\n"


def test_write_atomic_writes_whole_text_readable_by_others(tmp_path: Path) -> None:
    """The file holds exactly the data, mode 0644 (mkstemp's 0600 is widened)."""
    target = write_atomic(tmp_path / "t.json", "{}\n")
    assert target.read_bytes() == b"{}\n"
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "name, words",
    [
        ("", "empty file name"),
        ("no/such/dir/x.json", "does not exist"),
        ("x" * 256 + ".json", "file name too long"),
        (".", "is a folder"),
        ("sub/", "is a folder"),
    ],
)
def test_bad_output_paths_are_refused_before_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, words: str
) -> None:
    """Each bad output path is named with its problem."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigError, match=words):
        check_output_path(name, "--out")


def test_read_text_refuses_oversized_binary_and_foreign_encodings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Size cap (checked before reading), NUL bytes, Latin-1 and missing files."""
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * 100)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    with pytest.raises(ConfigError, match="500 bytes; the largest accepted is 100"):
        read_text(big, "scenario file")
    monkeypatch.undo()
    (tmp_path / "bin").write_bytes(b"a\x00b")
    (tmp_path / "lat").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match="binary file"):
        read_text(tmp_path / "bin", "f")
    with pytest.raises(ConfigError, match=r"not UTF-8 text .byte 3"):
        read_text(tmp_path / "lat", "f")
    with pytest.raises(ConfigError, match="no such file"):
        read_text(tmp_path / "none", "f")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    """A file without read permission: a ConfigError naming it."""
    path = tmp_path / "s.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match=r"cannot read .Permission denied"):
        read_text(path, "scenario file")


def test_merge_keys_and_anchors_still_work() -> None:
    """Shipped files use anchors (the compute catalog) and merges; both still load."""
    doc = load_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nsame: *b\n", "f")
    assert doc == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}, "same": {"x": 1, "y": 2}}


def test_dumps_json_refuses_nan() -> None:
    """NaN is not JSON: outputs refuse it instead of printing it."""
    assert dumps_json({"a": 1.5}) == '{"a": 1.5}'
    with pytest.raises(ConfigError, match="non-finite"):
        dumps_json({"a": float("nan")})


_YAML_TEXT = st.lists(
    st.sampled_from(
        [*list("ab1: -[]{}&*!|>'\"\n\t#,?"), "\x00", "!!int ", "!!bool ", "!!timestamp "]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_YAML_TEXT)
def test_any_text_loads_or_gives_one_config_error(text: str) -> None:
    """Random YAML-ish text: a value, or one ConfigError line naming the source."""
    try:
        load_yaml(text, "f.yaml")
    except ConfigError as e:
        assert str(e).startswith("f.yaml") and "\n" not in str(e)


def _typed(value: object) -> object:
    """``value`` with every scalar's type spelled out: 1 and 1.0 and True differ."""
    if isinstance(value, dict):
        return {"dict": [(_typed(k), _typed(v)) for k, v in value.items()]}
    if isinstance(value, list):
        return ["list", *(_typed(v) for v in value)]
    return (type(value).__name__, repr(value))


def _shipped_yaml() -> list[Path]:
    return sorted(p for d in SHIPPED for p in (ROOT / d).rglob("*.yaml"))


def test_every_shipped_file_parses_with_libyaml_as_with_the_safe_loader() -> None:
    """Presets, catalogs, profiles, defaults: libyaml gives the same values, types and
    key order as the hardened pure-Python loader users' files go through."""
    found = _shipped_yaml()
    assert len(found) >= 50, found
    for path in found:
        text = path.read_text(encoding="utf-8")
        assert _typed(load_shipped_yaml(text, path.name)) == _typed(load_yaml(text, path.name))


@pytest.mark.parametrize(
    "text", ["a: 1\na: 2\n", "a: [1\n", "a: !!int ''\n", "a:\n  b: 1\n   c: 2\n"]
)
def test_shipped_loader_refuses_as_load_yaml_does(text: str) -> None:
    """A broken shipped file gets load_yaml's own one-line message."""
    with pytest.raises(ConfigError) as safe:
        load_yaml(text, "x.yaml")
    with pytest.raises(ConfigError) as fast:
        load_shipped_yaml(text, "x.yaml")
    assert str(fast.value) == str(safe.value)


@pytest.mark.parametrize("tag", ["!!int", "!!bool", "!!timestamp", "!!float"])
def test_an_empty_tagged_value_is_one_config_error(tag: str) -> None:
    """``a: !!int`` with no value is a ConfigError naming the file, not a traceback."""
    with pytest.raises(ConfigError, match=r"^t\.yaml: cannot read a value"):
        load_yaml(f"a: {tag} \n", "t.yaml")


_ENTRY_DOCS = [
    "a: 1\nhardware:\n  gpu: H100\n  links: {net: ib}\nb: [1, 2]\n",  # in the middle
    "# c\nhardware: {gpu: x}  # last\n",  # last, flow style value
    "a: 1\n",  # missing
    "{hardware: {gpu: x}, a: 1}\n",  # flow-style top level
    "base: &b {gpu: x}\nhardware: *b\n",  # an alias into another entry
    "hardware: &h {gpu: x}\nother: *h\n",  # an anchor used by another entry
    "hardware:\n- 1\n- 2\nz: |\n  text\n",  # a sequence at column 0, a block scalar
    "- 1\n- 2\n",  # not a mapping
    "a: 1\r\nhardware: |\r\n  x\r\nb: 2\r\n",  # other line breaks
    "",
]


@pytest.mark.parametrize("text", _ENTRY_DOCS)
def test_one_entry_parses_as_in_the_whole_document(text: str) -> None:
    """Reading one top-level entry gives what the whole document holds there."""
    doc = load_shipped_yaml(text, "d.yaml")
    want = doc.get("hardware") if isinstance(doc, dict) else None
    assert _typed(load_shipped_yaml_entry(text, "hardware", "d.yaml")) == _typed(want)


def test_every_shipped_files_entries_parse_as_in_the_whole_file() -> None:
    """Each top-level entry of every shipped file, read alone, is the file's own."""
    for path in _shipped_yaml():
        text = path.read_text(encoding="utf-8")
        doc = load_shipped_yaml(text, path.name)
        for key in doc if isinstance(doc, dict) else ():
            got = load_shipped_yaml_entry(text, str(key), path.name)
            assert _typed(got) == _typed(doc[key]), (path, key)


# --- YAML 1.2 core scalars, one strict JSON reader, locks (issue 23) -----------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("2:1", "2:1"),  # YAML 1.1: the sexagesimal integer 121
        ("1:30:00", "1:30:00"),  # YAML 1.1: 5400
        ("no", "no"), ("yes", "yes"), ("on", "on"), ("off", "off"), ("y", "y"), ("N", "N"),
        ("010", "010"),  # YAML 1.1: octal 8
        ("2024-01-01", "2024-01-01"),  # YAML 1.1: a date
        ("1e9", 1e9), ("2e0", 2.0), ("-3.5E-2", -0.035), (".5", 0.5), ("12.", 12.0),
        ("12", 12), ("-0", 0), ("+3", 3), ("1_000", 1000), ("0x1F", 31),
        ("true", True), ("False", False), ("TRUE", True),
        ("~", None), ("null", None), ("NULL", None), ("", None),
    ],
)  # fmt: skip
def test_plain_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    got = load_yaml(f"k: {text}\n", "f.yaml")["k"]
    assert got == value and type(got) is type(value)


def test_keys_follow_the_same_rule() -> None:
    """``no: 1`` is the key 'no', not False (YAML 1.1)."""
    assert load_yaml("no: 1\non: 2\n", "f.yaml") == {"no": 1, "on": 2}


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"x": {"b": 1, "b": 1}}', "duplicate key 'b'"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": ' + "9" * 5000 + "}", "cannot read a value"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": 1,', "not valid JSON (line 1 column"),
    ],
)
def test_json_is_as_strict_as_yaml(text: str, words: str) -> None:
    from sim.files import load_json

    with pytest.raises(ConfigError, match=re.escape(words)):
        load_json(text, "m.json")


def test_read_data_picks_the_format_by_suffix(tmp_path: Path) -> None:
    from sim.files import read_data

    (tmp_path / "a.json").write_text('{"k": "no"}')
    (tmp_path / "a.yaml").write_text("k: 2:1\n")
    assert read_data(tmp_path / "a.json", "file") == {"k": "no"}
    assert read_data(tmp_path / "a.yaml", "file") == {"k": "2:1"}


def test_reads_never_go_past_the_cap(tmp_path: Path) -> None:
    """A file larger than the cap is refused from its size, before it is read."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 2048)
    with pytest.raises(ConfigError, match="2,048 bytes; the largest accepted is 1,024"):
        files.read_bytes(big, "file", max_bytes=1024)


def test_a_held_output_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    from sim.locks import output_lock

    out = tmp_path / "s.csv"
    with output_lock(out, "--out"):
        lock = tmp_path / ".s.csv.lock"
        assert f"pid {os.getpid()}" in lock.read_text()
        with (
            pytest.raises(ConfigError, match=f"another run .pid {os.getpid()} on "),
            output_lock(out, "--out"),
        ):
            pass
    assert not lock.exists()
    with output_lock(out, "--out"):  # released: taken again
        pass
