"""Reading input files and writing outputs safely: the one place files meet the simulator.

Every reader of a user file (scenario, topology, catalog, profile, measurement files,
studies) goes through :func:`read_text` and :func:`load_yaml`, which refuse hostile or
careless input with a one-line :class:`~sim.errors.ConfigError` before any work starts:

- files that are not UTF-8 text (binary, Latin-1), larger than :data:`MAX_FILE_BYTES`,
  unreadable, missing, folders, or with names longer than the file system allows;
- YAML nested deeper than :data:`MAX_DEPTH`, with more than :data:`MAX_ALIASES` aliases
  or expanding (aliases followed) to more than :data:`MAX_NODES` nodes: a "billion laughs"
  file is refused while it is composed, never expanded;
- duplicate keys in a mapping (the key and its line are named), and integers too long for
  Python to read (more than 4,300 digits).

Every output goes through :func:`write_atomic` (a temporary file in the target folder, then
``os.replace``), so a full disk or a crash leaves the old file or nothing, never half a
file; :func:`check_output_path` lets a command refuse a bad output path before it works.

>>> load_yaml("a: 1\\nb: [2, 3]\\n", "demo.yaml")
{'a': 1, 'b': [2, 3]}
>>> load_yaml("a: 1\\na: 2\\n", "demo.yaml")
Traceback (most recent call last):
...
sim.errors.ConfigError: demo.yaml: line 2: duplicate key 'a'
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sim.errors import ConfigError

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "check_output_path",
    "dumps_json",
    "load_shipped_yaml",
    "load_shipped_yaml_entry",
    "load_yaml",
    "read_text",
    "write_atomic",
]

#: Largest input file read (bytes). The biggest shipped file (the compute catalog) is
#: ~30 KB and a large nccl-tests log a few MB; 64 MiB leaves room for measurement files.
MAX_FILE_BYTES = 64 * 2**20
#: Deepest nesting of YAML collections; shipped files nest at most ~6 levels.
MAX_DEPTH = 64
#: Most alias events (``*name``) in one YAML document; shipped files use a handful.
MAX_ALIASES = 1000
#: Most nodes of a YAML document with every alias expanded (a billion-laughs guard).
MAX_NODES = 200_000

_MERGE = "tag:yaml.org,2002:merge"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _UniqueKeys(yaml.constructor.SafeConstructor):
    """SafeConstructor that refuses a mapping with a duplicate key (a ConfigError naming it)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: a mapping key must be a single "
                    f"value, got {_short(key)}"
                ) from None
            if dup:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        return super().construct_mapping(node, deep=deep)


class _SafeLoader(_UniqueKeys, yaml.SafeLoader):
    """A SafeLoader that caps nesting, aliases and expanded size, and refuses duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases (*name)"
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and self._size(node) > MAX_NODES:
            raise ConfigError(
                f"line {node.start_mark.line + 1}: expands to more than {MAX_NODES:,} values "
                "once aliases are followed"
            )
        return node

    def _size(self, node: yaml.Node) -> int:
        """Nodes under ``node`` with aliases expanded; memoised, so linear in the file."""
        key = id(node)
        if key not in self._sizes:
            if isinstance(node, yaml.MappingNode):
                total = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                total = 1 + sum(self._size(v) for v in node.value)
            else:
                total = 1
            self._sizes[key] = min(total, MAX_NODES + 1)
        return self._sizes[key]


#: Whether PyYAML was built with libyaml's C parser (its wheels are).
_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))

if TYPE_CHECKING or _LIBYAML:

    class _ShippedLoader(_UniqueKeys, yaml.CSafeLoader):
        """libyaml's parser with :class:`_UniqueKeys`'s constructor."""


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document safely; every problem is one ConfigError line.

    Parameters
    ----------
    text : str
        The document.
    source : str
        The file name (or option) for messages.

    Returns
    -------
    object
        The parsed document (``None`` for an empty one).

    Raises
    ------
    ConfigError
        Malformed YAML (with its line), nesting deeper than :data:`MAX_DEPTH`, more than
        :data:`MAX_ALIASES` aliases or :data:`MAX_NODES` expanded values, a duplicate key,
        a number Python refuses to read (e.g. an integer over 4,300 digits), or an empty
        explicitly tagged value (``!!int``).
    """
    loader: _SafeLoader | None = None
    try:
        loader = _SafeLoader(text)  # reads the text: refuses control characters here
        return loader.get_single_data()
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = e.problem or e.context or "malformed YAML"
        raise ConfigError(f"{source}:{where} invalid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {str(e).splitlines()[0]}") from None
    except (ValueError, OverflowError) as e:  # int over 4,300 digits, bad timestamp
        raise ConfigError(f"{source}: cannot read a value: {str(e).split(';')[0]}") from None
    except (IndexError, KeyError, AttributeError):  # PyYAML's constructors on `!!int ''`
        raise ConfigError(
            f"{source}: cannot read a value: an explicitly tagged value (!!int, !!bool, "
            "!!timestamp, ...) is empty or malformed"
        ) from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_shipped_yaml(text: str, source: str) -> Any:
    """Parse a YAML file shipped with clustersim (presets, catalogs, profiles, defaults).

    The same document as :func:`load_yaml` gives (duplicate keys refused the same way),
    parsed by libyaml's C parser: a shipped profile parses in well under a millisecond
    instead of tens. Only for package data, which the test suite checks through
    :func:`load_yaml` too: libyaml has no nesting limit (a hostile file could exhaust the
    C stack), so every file a user names goes through :func:`load_yaml`. Any problem is
    handed to :func:`load_yaml`, so messages are its own. Without libyaml it *is*
    :func:`load_yaml`.
    """
    if not _LIBYAML:
        return load_yaml(text, source)
    loader = _ShippedLoader(text)
    try:
        return loader.get_single_data()
    except (ConfigError, yaml.YAMLError, ArithmeticError, LookupError, ValueError,
            AttributeError, RecursionError):  # fmt: skip
        return load_yaml(text, source)  # its message, or its value where libyaml refused
    finally:
        loader.dispose()


def load_shipped_yaml_entry(text: str, key: str, source: str) -> Any:
    """``load_shipped_yaml(text, source).get(key)``, parsing only that top-level entry.

    libyaml's events locate the lines of the entry ``key:`` of the document's top-level
    block mapping, and only those lines are parsed, so the rest of the file is never
    built into Python objects (choosing a profile reads six profiles' ``hardware``
    only). Anything unusual (a flow-style or indented top level, an alias in the entry,
    no libyaml) parses the whole file instead: same value either way.

    >>> load_shipped_yaml_entry("a: 1\\nb: {c: [2, 3]}\\nd: 4\\n", "b", "demo.yaml")
    {'c': [2, 3]}
    """
    plain = _LIBYAML and not any(c in text for c in _OTHER_BREAKS)
    lines = _entry_lines(text, key) if plain else None
    if lines is None:
        doc = load_shipped_yaml(text, source)
        return doc.get(key) if isinstance(doc, dict) else None
    if not lines:
        return None
    first, end = lines
    chunk = "\n".join(text.split("\n")[first:end]) + ("\n" if end is not None else "")
    return load_shipped_yaml(chunk, source)[key]


#: Line breaks YAML counts besides "\n" (a file with one is parsed whole).
_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _entry_lines(text: str, key: str) -> tuple[int, int | None] | tuple[()] | None:
    """Line range of top-level entry ``key`` (``()``: no such key), or None when the
    document is not a plain block mapping at column 0 with the entry free of aliases."""
    loader = yaml.CSafeLoader(text)
    try:
        top = [loader.get_event() for _ in range(3)][2]
        if not isinstance(top, yaml.MappingStartEvent) or top.flow_style or _at(top)[1]:
            return None
        start: int | None = None
        while True:
            k = loader.get_event()
            if isinstance(k, yaml.MappingEndEvent):
                return () if start is None else (start, None)
            if not isinstance(k, yaml.ScalarEvent) or _at(k)[1]:
                return None
            if start is not None:  # the next key: the entry ends on the line above it
                return start, _at(k)[0]
            found = k.value == key
            if found:
                start = _at(k)[0]
            if not _skip_value(loader, aliases_ok=not found):
                return None
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def _at(event: yaml.Event) -> tuple[int, int]:
    """(line, column) where ``event`` starts (0-based)."""
    mark: Any = event.start_mark
    return mark.line, mark.column


def _skip_value(loader: Any, aliases_ok: bool) -> bool:
    """Consume one node's events; False when it holds an alias and ``aliases_ok`` is not."""
    depth = 0
    while True:
        e = loader.get_event()
        if isinstance(e, yaml.AliasEvent) and not aliases_ok:
            return False
        if isinstance(e, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(e, yaml.CollectionEndEvent):
            depth -= 1
        if depth == 0:
            return True


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int | None = None) -> str:
    """Read a UTF-8 text file, refusing binary, oversized, unreadable or missing files.

    Parameters
    ----------
    path : str or Path
        The file.
    what : str
        What the file is, for messages (e.g. ``"scenario file"``).
    max_bytes : int, optional
        Largest size accepted (bytes); default :data:`MAX_FILE_BYTES`.

    Returns
    -------
    str

    Raises
    ------
    ConfigError
        One line naming the file and the problem.
    """
    p = Path(path)
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise ConfigError(f"{what} {str(path)!r}: is a folder, not a file")
        if size > max_bytes:
            raise ConfigError(
                f"{what} {str(path)!r}: {size:,} bytes; the largest accepted is {max_bytes:,}"
            )
        data = p.read_bytes()[: max_bytes + 1]
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{what} {_short(str(path))}: cannot read ({e.strerror})") from None
    return decode_text(data, f"{what} {str(path)!r}")


def decode_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; binary (a NUL byte) or other encodings are a ConfigError."""
    if b"\x00" in data:
        raise ConfigError(f"{where}: a binary file, not text (a NUL byte)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None


def dumps_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and infinities (which are not JSON).

    Raises
    ------
    ConfigError
        A value is NaN or infinite: the inputs allowed a non-finite result.
    """
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError as e:
        raise ConfigError(f"the result holds a non-finite number ({e}); check the inputs") from None


def check_output_path(path: str | os.PathLike[str], option: str) -> Path:
    """Refuse an output path that cannot be written, before any work starts.

    Parameters
    ----------
    path : str or Path
        The file to write later.
    option : str
        The option naming it, for messages (``--out``).

    Returns
    -------
    Path

    Raises
    ------
    ConfigError
        Empty name, a folder, a name too long, or a folder that does not exist or is not
        writable.
    """
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{option}: empty file name")
    target = Path(text)
    if len(target.name.encode("utf-8", "surrogateescape")) > 255 or len(text) > 4096:
        raise ConfigError(f"{option} {_short(text)}: file name too long (at most 255 bytes)")
    if target.is_dir() or text.endswith(("/", os.sep)):
        raise ConfigError(f"{option} {text!r}: is a folder; give a file name")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{option} {text!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {text!r}: folder {str(folder)!r} is not writable")
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{option} {text!r}: the file is not writable")
    return target


def write_atomic(path: str | os.PathLike[str], data: str | bytes, option: str = "output") -> Path:
    """Write ``data`` to ``path`` through a temporary file, so a failure leaves no half file.

    The temporary file sits in the target's folder and replaces the target with
    ``os.replace`` (atomic on POSIX and Windows); the written file is world-readable.

    Parameters
    ----------
    path : str or Path
        The file to write.
    data : str or bytes
        The contents; text is written as UTF-8.
    option : str
        The option naming the path, for messages.

    Returns
    -------
    Path

    Raises
    ------
    ConfigError
        The path cannot be written (see :func:`check_output_path`), or writing failed
        (disk full, permissions); the old file is left as it was.
    """
    target = check_output_path(path, option)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name[:200]}-", suffix=".tmp"
        )
    except OSError as e:
        raise ConfigError(f"{option} {str(path)!r}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are meant to be shared
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"{option} {str(path)!r}: cannot write ({e.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
