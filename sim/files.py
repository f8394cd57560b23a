"""Reading input files and writing outputs safely: the one place files meet the simulator.

Every reader of a user file (scenario, topology, catalog, profile, measurement files,
studies, result files, logs) goes through :func:`read_bytes`/:func:`read_text` and
:func:`load_yaml`/:func:`load_json` (or :func:`read_data`, which picks by suffix). Both
formats follow the same rules, and refuse hostile or careless input with a one-line
:class:`~sim.errors.ConfigError` before any work starts:

- paths that are not regular files (a folder, a FIFO, a device such as ``/dev/zero``, a
  socket: each named as what it is), files larger than :data:`MAX_FILE_BYTES` (refused
  from their size, and never read past the cap), unreadable or missing files, names
  longer than the file system allows, and text that is not UTF-8 (binary, Latin-1);
- YAML nested deeper than :data:`MAX_DEPTH`, with more than :data:`MAX_ALIASES` aliases
  or expanding (aliases followed) to more than :data:`MAX_NODES` nodes: a "billion laughs"
  file is refused while it is composed, never expanded; JSON nested past the
  interpreter's recursion limit;
- duplicate keys in a mapping or JSON object (the key is named, with its line in YAML),
  integers too long for Python to read (more than 4,300 digits), and in JSON the
  non-standard ``NaN``/``Infinity``.

**YAML scalars follow the YAML 1.2 core schema, not YAML 1.1.** PyYAML implements YAML
1.1, whose implicit types surprise: ``2:1`` is the sexagesimal integer 121, ``no``,
``yes``, ``on``, ``off``, ``y`` and ``n`` are booleans, ``010`` is octal 8, ``2024-01-01``
is a date, and ``1e9`` (no dot) is a string. Here a plain scalar is

- a boolean only when it is ``true`` or ``false`` (also ``True``/``TRUE``...);
- null when it is empty, ``~``, ``null`` (``Null``, ``NULL``);
- an integer when it is decimal without a leading zero (``0``, ``-12``, ``1_000_000``) or
  hexadecimal (``0x1F``);
- a float when it is decimal with a dot or an exponent (``2.5``, ``1e9``, ``-3.5E-2``,
  ``.5``), or ``.inf``/``-.inf``/``.nan``;
- a string otherwise: ``2:1``, ``no``, ``on``, ``010``, ``2024-01-01`` reach the validators
  as the text written, so a field that wants a number or a boolean refuses them by name
  (``expected bool, got 'on'``) and a field that wants text gets what was typed. Quote a
  value to make it a string in any case (``"1e9"``).

Every output goes through :func:`write_atomic`: a regular file (or a new one) is written
to a temporary file in its folder and renamed over the target (``os.replace``), so a full
disk or a crash leaves the old file or nothing, never half a file. A symbolic link is
followed (its target is replaced, the link kept, as a shell's ``>`` would); a character
device (``/dev/null``) or a FIFO with a reader is written through, never replaced, and so
is anything under ``/dev`` or ``/proc``; a folder, a block device, a socket or a FIFO
without a reader is refused. :func:`check_output_path` lets a command refuse a bad output
path before it works.

>>> load_yaml("a: 1\\nb: [2, 3]\\n", "demo.yaml")
{'a': 1, 'b': [2, 3]}
>>> load_yaml("ratio: 2:1\\nflag: no\\nrate: 1e9\\n", "demo.yaml")
{'ratio': '2:1', 'flag': 'no', 'rate': 1000000000.0}
>>> load_yaml("a: 1\\na: 2\\n", "demo.yaml")
Traceback (most recent call last):
...
sim.errors.ConfigError: demo.yaml: line 2: duplicate key 'a'
>>> load_json('{"a": 1, "a": 2}', "m.json")
Traceback (most recent call last):
...
sim.errors.ConfigError: m.json: duplicate key 'a'
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
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
    "decode_text",
    "dumps_json",
    "file_stamp",
    "load_json",
    "load_shipped_yaml",
    "load_shipped_yaml_entry",
    "load_yaml",
    "read_bytes",
    "read_data",
    "read_text",
    "write_atomic",
    "writes_through",
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
    """A SafeLoader that caps nesting, aliases and expanded size, refuses duplicate keys,
    and resolves plain scalars by the YAML 1.2 core schema (see the module docstring)."""

    yaml_implicit_resolvers = {}  # noqa: RUF012 - filled below

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


# YAML 1.2 core schema resolvers (PyYAML ships YAML 1.1's: sexagesimal, yes/no/on/off,
# octal 010, timestamps). Integers come before floats, and a float needs a dot or an
# exponent, so "12" is an int and "1e9" a float.
_IMPLICIT = [
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9](?:_?[0-9])*)|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"[-+]?(?:(?:0|[1-9](?:_?[0-9])*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:merge", r"<<", "<"),
]
for _tag, _pattern, _first in _IMPLICIT:
    _SafeLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), list(_first))

#: Whether PyYAML was built with libyaml's C parser (its wheels are).
_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))

if TYPE_CHECKING or _LIBYAML:

    class _ShippedLoader(_UniqueKeys, yaml.CSafeLoader):
        """libyaml's parser with :class:`_UniqueKeys`'s constructor and the same YAML 1.2
        core scalars as :class:`_SafeLoader` (libyaml parses; the resolver is Python's)."""

        yaml_implicit_resolvers = _SafeLoader.yaml_implicit_resolvers


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


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words (``a FIFO (named pipe)``)."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: str | os.PathLike[str], what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, refused before reading otherwise.

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
    bytes

    Raises
    ------
    ConfigError
        One line naming the file and the problem: missing, unreadable, a folder, FIFO,
        device or socket (never opened, so ``/dev/zero`` or a FIFO cannot stall the read),
        or larger than ``max_bytes`` (and never read past it, should it grow meanwhile).
    """
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    name = _short(str(path), 200)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {name}: is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise ConfigError(
                f"{what} {name}: {info.st_size:,} bytes; the largest accepted is {max_bytes:,}"
            )
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the stat
                raise ConfigError(f"{what} {name}: not a regular file")
            data = f.read(max_bytes + 1)
    except ConfigError:
        raise
    except FileNotFoundError:
        raise ConfigError(f"{what} {name}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{what} {name}: cannot read ({e.strerror})") from None
    except ValueError as e:  # a NUL byte in the name
        raise ConfigError(f"{what} {name}: cannot read ({e})") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {name}: grew past the largest accepted, {max_bytes:,} bytes")
    return data


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
        One line naming the file and the problem (see :func:`read_bytes`), or text that
        is not UTF-8.
    """
    return decode_text(read_bytes(path, what, max_bytes), f"{what} {_short(str(path), 200)}")


def read_data(path: str | os.PathLike[str], what: str) -> Any:
    """A JSON (``.json``) or YAML (any other suffix) file, read and parsed by the same rules.

    Raises
    ------
    ConfigError
        See :func:`read_text`, :func:`load_json` and :func:`load_yaml`.
    """
    text = read_text(path, what)
    source = str(path)
    if Path(source).suffix.lower() == ".json":
        return load_json(text, source)
    return load_yaml(text, source)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"duplicate key {_short(key)}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ConfigError(f"{name} is not a JSON number; write a finite number or null")


def load_json(text: str, source: str) -> Any:
    """Parse one JSON document by the rules :func:`load_yaml` applies to YAML.

    Parameters
    ----------
    text : str
        The document.
    source : str
        The file name (with a line number for JSON-lines files), for messages.

    Returns
    -------
    object

    Raises
    ------
    ConfigError
        Malformed JSON (with its line and column), a duplicate key in an object, ``NaN``
        or ``Infinity``, nesting deeper than the interpreter's recursion limit (about
        1,000 levels; JSON has no aliases, so its size is bounded by the file's), or an
        integer Python refuses to read (over 4,300 digits).
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{source}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    except ValueError as e:  # an integer over 4,300 digits
        raise ConfigError(f"{source}: cannot read a value: {str(e).split(';')[0]}") from None


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


#: Folders whose files are written through, never replaced (devices, /proc/self/fd/N).
_WRITE_THROUGH = ("/dev/", "/proc/")


def _output_target(path: str | os.PathLike[str], option: str) -> tuple[Path, bool]:
    """Where an output goes and how: ``(file, True)`` to write through it in place (a
    character device or FIFO), ``(file, False)`` to replace it atomically (a regular
    file or a new one; a symbolic link is followed to its target)."""
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{option}: empty file name")
    if "\x00" in text:
        raise ConfigError(f"{option} {_short(text)}: a file name cannot hold a NUL byte")
    given = Path(text)
    if len(given.name.encode("utf-8", "surrogateescape")) > 255 or len(text) > 4096:
        raise ConfigError(f"{option} {_short(text)}: file name too long (at most 255 bytes)")
    if text.endswith(("/", os.sep)):
        raise ConfigError(f"{option} {text!r}: is a folder; give a file name")
    try:
        info: os.stat_result | None = os.stat(given)
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise ConfigError(f"{option} {_short(text)}: cannot use ({e.strerror})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        if stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode):
            return given, True
        raise ConfigError(
            f"{option} {text!r}: is {_kind(info.st_mode)}; give a regular file's name"
        )
    if os.path.abspath(text).startswith(_WRITE_THROUGH):
        return given, True
    # A symbolic link (or a chain of them) is followed, as a shell's ">" does: the link
    # stays, its target gets the output.
    return Path(os.path.realpath(given)) if given.is_symlink() else given, False


def writes_through(path: str | os.PathLike[str], option: str) -> bool:
    """Whether an output at ``path`` is written in place (a device, a FIFO, under /dev)
    rather than replaced."""
    return _output_target(path, option)[1]


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
        The file that will be written: ``path``, or a symbolic link's target.

    Raises
    ------
    ConfigError
        Empty name, a folder, block device or socket, a name too long, a folder that does
        not exist or is not writable, or a file that is not writable.
    """
    target, through = _output_target(path, option)
    text = str(path)
    if through:
        if not os.access(target, os.W_OK):
            raise ConfigError(f"{option} {text!r}: not writable")
        return target
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{option} {text!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {text!r}: folder {str(folder)!r} is not writable")
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{option} {text!r}: the file is not writable")
    return target


def _write_through(target: Path, raw: bytes, option: str) -> Path:
    """Write ``raw`` into a device or FIFO in place; a FIFO without a reader is refused
    at once rather than waited on."""
    try:
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        why = "a FIFO with no reader" if e.errno == errno.ENXIO else e.strerror
        raise ConfigError(f"{option} {str(target)!r}: cannot write ({why})") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise ConfigError(f"{option} {str(target)!r}: cannot write ({e.strerror})") from None
    finally:
        os.close(fd)
    return target


def write_atomic(path: str | os.PathLike[str], data: str | bytes, option: str = "output") -> Path:
    """Write ``data`` to ``path`` through a temporary file, so a failure leaves no half file.

    The temporary file sits in the target's folder and replaces the target with
    ``os.replace`` (atomic on POSIX and Windows); the written file is world-readable.
    A symbolic link is followed and its target replaced (the link stays); a character
    device or a FIFO is written through in place, never replaced (see the module
    docstring).

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
        The file written (a symbolic link's target).

    Raises
    ------
    ConfigError
        The path cannot be written (see :func:`check_output_path`), or writing failed
        (disk full, permissions); the old file is left as it was.
    """
    target = check_output_path(path, option)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if writes_through(path, option):
        return _write_through(target, raw, option)
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


def file_stamp(name: str | None) -> tuple[int, int] | None:
    """(modification time in ns, size in bytes) of ``name`` where it is a file, else None
    (a preset or shipped name, ``none``, nothing): what a cache keyed on a topology or
    profile named by path adds to its key, so a file edited between two calls in one
    process (the Python API, a notebook) is read again rather than answered from the cache.

    >>> file_stamp("h100-ib-ndr") is None and file_stamp(None) is None
    True
    """
    if not name:
        return None
    try:
        st = os.stat(name)
    except (OSError, ValueError):  # not a path (or gone): the loader says what is wrong
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None
