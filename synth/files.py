"""Files in and out: user files read within limits, outputs written whole or not at all.

Writing (`write_atomic`):
- Only regular files are written. A directory, device, FIFO or socket at the path, or a
  path that ends in "/", is refused with one line (BadInput): `-o /dev/null` must not
  turn the device into a file.
- A symbolic link at a path the user named (`-o`) is written through: its final target
  is replaced, the link stays. At a path synth names itself inside a folder (frontier
  files, report pages, cache entries: `follow_links=False`) the link itself is
  replaced, so nothing is ever written outside that folder.
- An existing file keeps its mode; a new one gets 0666 less the umask.
- The data goes to a temporary file beside the target, then is renamed over it, so a
  reader or a kill never sees half a file. Temporaries are named `.synth-HOST-PID-N.tmp`
  (short, so a 250-character target name still fits); a later write into the same folder
  removes those of processes on this host that no longer run (SIGKILL leaves them).
- An OSError (disk full, read-only folder, a file where a folder should be) becomes
  OutputError: one line, exit 2.

Reading (`read_text`, `load_yaml`, `load_json`):
- Only regular files are read (a FIFO or /dev/zero would never end), at most `limit`
  bytes, as UTF-8.
- YAML: the safe loader without aliases (a few hundred bytes of nested aliases expand to
  gigabytes), no key given twice in one mapping, at most MAX_DEPTH levels of nesting,
  and numbers like `1e308` read as numbers (YAML 1.2), not as strings.
- JSON: nesting too deep for the parser is refused, not a RecursionError.

Names that become paths go through `safe_component`, and `inside` checks that a path
stays within the folder a user gave.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import re
import socket
import stat
from pathlib import Path

import yaml

from synth.errors import BadInput

MAX_DEPTH = 64  # nesting levels in a YAML or JSON document
TEXT_LIMIT = 16 << 20  # bytes: topology files, hints, cache entries
SCHEDULE_LIMIT = 128 << 20  # bytes: a schedule file (read into about ten times as much memory)
QUOTE = 40  # characters of a user's value quoted in a message


class OutputError(BadInput):
    """An output could not be written: one line, exit 2."""


def quote(value, width: int = QUOTE) -> str:
    """repr(value), cut to about `width` characters, on one line, for a message (a huge
    integer is described, not printed: turning it into digits can take seconds)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


# --- writing ------------------------------------------------------------------------

def write_atomic(path: str | Path, data: str | bytes, follow_links: bool = True) -> Path:
    """Write `data` to `path` whole or not at all; returns the path (module docstring)."""
    text = os.fspath(path)
    if not text or text.endswith(os.sep):
        raise BadInput(f"{quote(text, 80) if text else 'an empty path'}: expected a file "
                       "name, not a folder")
    path = Path(text)
    try:
        why = _dangling(path, follow_links)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {_reason(e)}") from None
    if why:
        raise OutputError(f"cannot write {path}: {why}")
    if follow_links:
        target = Path(os.path.realpath(path))  # through symbolic links to the final file
    else:  # the link itself is replaced; its folder is the caller's own
        target = Path(os.path.realpath(path.parent)) / path.name
        if target.is_symlink():
            target.unlink(missing_ok=True)
    mode = _mode_for(target, path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(target.parent)
        tmp = _temporary(target.parent)
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        raise OutputError(f"cannot write {path}: {_reason(e)}") from None
    return path


def _dangling(path: Path, follow_links: bool) -> str | None:
    """Why writing `path` would make folders where a symbolic link leads to nothing, else
    None: a link among its folders whose chain ends nowhere (or loops), or, followed, a
    link at the file whose final target's folder is missing. O(path's parts)."""
    for folder in reversed(path.parents):
        if folder.is_symlink() and not folder.exists():
            return (f"{folder} is a symbolic link that leads to nothing (a missing "
                    "target, or a loop)")
    if follow_links and path.is_symlink() and not path.exists():
        target = Path(os.path.realpath(path))
        if not target.parent.is_dir():
            return (f"it is a symbolic link to {target}, whose folder does not exist "
                    "(synth makes no folders where a link leads)")
    return None


def check_folder(path: str | Path, option: str = "--out") -> None:
    """BadInput, before any work, unless `path` is a folder or could be made one: it,
    or the nearest of its parents that exists, is a file (a plan of minutes failed at
    its end on `-o afile/sub`)."""
    here = Path(path)
    while True:
        if here.exists() or here.is_symlink():
            if not here.is_dir():
                raise BadInput(f"{quote(str(here), 80)}: exists and is not a folder "
                               f"({option} names a folder)")
            return
        if here.parent == here:
            return
        here = here.parent


def write_folder(root: str | Path, files: dict) -> list[Path]:
    """Write `files` ({path relative to root: text or bytes}) under `root` all or none:
    every file goes to a temporary beside its target first, and only when all are
    written are they renamed into place, in the order given (put an index last). On any
    failure (a full disk) the temporaries and the folders made for them are removed and
    `root` is as it was. A path must stay inside `root`, through no symbolic link to a
    folder (refused: BadInput); a link at a file's own path is replaced, not followed,
    so nothing is written outside `root`. Returns the paths written."""
    root = Path(root)
    targets = [(inside_without_links(root, Path(rel)), data) for rel, data in files.items()]
    made, staged = [], []
    try:
        for target, data in targets:
            made += make_folders(target.parent)
            mode = _mode_for(target, target) if not target.is_symlink() else \
                0o666 & ~_umask()
            tmp = _temporary(target.parent)
            staged.append((tmp, target))
            with open(tmp, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
            os.chmod(tmp, mode)
    except OSError as e:
        _undo(staged, made)
        raise OutputError(f"cannot write {root}: {_reason(e)}; it is as it was") from None
    except BaseException:
        _undo(staged, made)
        raise
    for tmp, target in staged:
        if target.is_symlink():
            target.unlink()
        os.replace(tmp, target)
    return [target for _, target in staged]


def inside_without_links(root: Path, rel: Path) -> Path:
    """root / rel, once rel is checked to stay inside root through no symbolic link to a
    folder and not to name a folder (BadInput)."""
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise BadInput(f"{quote(str(rel), 80)}: not a path inside {root}")
    folder = root
    for part in rel.parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise BadInput(f"{quote(str(folder), 80)}: a symbolic link; synth writes only "
                           f"inside {root}, through no link")
    target = folder / rel.parts[-1]
    if target.is_dir() and not target.is_symlink():
        raise BadInput(f"{quote(str(target), 80)}: is a folder; synth writes only regular "
                       "files")
    return target


def make_folders(folder: Path) -> list[Path]:
    """Make `folder` and any missing parents; the ones made, outermost first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for f in reversed(missing):
        f.mkdir()
    return list(reversed(missing))


def _undo(staged: list, made: list[Path]) -> None:
    for tmp, _ in staged:
        tmp.unlink(missing_ok=True)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass


def _mode_for(target: Path, path: Path) -> int:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return 0o666 & ~_umask()
    except OSError as e:
        raise OutputError(f"cannot write {path}: {_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise BadInput(f"{path}: is {what}; synth writes only regular files")
    return stat.S_IMODE(st.st_mode)


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_COUNTER = itertools.count()
_TEMPORARY = re.compile(r"\.synth-([0-9a-f]{6})-(\d+)-\d+\.tmp")
_SWEPT: set[str] = set()


def _temporary(folder: Path) -> Path:
    return folder / f".synth-{_HOST}-{os.getpid()}-{next(_COUNTER)}.tmp"


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporaries of this host's processes that no longer run; once a folder
    per process (a cache folder holds thousands of files)."""
    key = os.fspath(folder)
    if key in _SWEPT:
        return
    _SWEPT.add(key)
    try:
        names = [e.name for e in os.scandir(folder) if e.name.startswith(".synth-")]
    except OSError:
        return
    for name in names:
        m = _TEMPORARY.fullmatch(name)
        if m and m.group(1) == _HOST and not _running(int(m.group(2))):
            (folder / name).unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EROFS:
        return "the file system is read-only"
    if e.errno == errno.ENAMETOOLONG:
        return "the name is too long"
    return e.strerror or str(e)


# --- names that become paths -----------------------------------------------------------

def safe_component(name: str) -> str:
    """`name` as one path component that every file system and tool accepts: letters,
    digits and _ . + - only, never hidden, '.' or '..', at most 100 characters; and one
    name per component. The colon of synth's own names becomes _ (ring:4 -> ring_4);
    any other change appends a hash of the whole name (集群 -> __-2b1d6e0f, 'ring 4'
    -> ring_4-9e3c1a57), so different names never share a folder."""
    name = str(name)
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    safe = re.sub(r"^\.", "_", safe) or "_"
    if safe[:100] != name.replace(":", "_") or len(safe) > 100:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:91]}-{digest}"
    return safe


def inside(folder: str | Path, path: str | Path) -> Path:
    """`path`, once it is checked to lie within `folder` (symbolic links resolved)."""
    root, full = Path(os.path.realpath(folder)), Path(os.path.realpath(path))
    if full != root and root not in full.parents:
        raise BadInput(f"{path}: outside {folder}; nothing is written there")
    return Path(path)


# --- reading ---------------------------------------------------------------------------

def read_bytes(path: str | Path, limit: int = TEXT_LIMIT, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; BadInput otherwise."""
    name = os.fspath(path)
    if not name:
        raise BadInput(f"an empty name where a {what} was expected")
    try:
        st = os.stat(name)
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{quote(name, 80)}: is a folder, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{quote(name, 80)}: not a regular file (a device or pipe is "
                           "not read)")
        if st.st_size > limit:
            raise BadInput(f"{quote(name, 80)}: {st.st_size:,} bytes, over the "
                           f"{limit:,}-byte limit for a {what}")
        with open(name, "rb") as f:
            # read(n) allocates n bytes first: a 1 GB limit's buffer for a small file
            data = f.read(st.st_size + 1)
            if len(data) > st.st_size:  # it grew since: the rest, up to the limit
                data += f.read(limit + 1 - len(data))
    except OSError as e:
        raise BadInput(f"{quote(name, 80)}: cannot read: {_reason(e)}") from None
    if len(data) > limit:
        raise BadInput(f"{quote(name, 80)}: over the {limit:,}-byte limit for a {what}")
    return data


def read_text(path: str | Path, limit: int = TEXT_LIMIT, what: str = "file") -> str:
    try:
        return read_bytes(path, limit, what).decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{quote(os.fspath(path), 80)}: not UTF-8 text (byte {e.start})"
                       ) from None


# YAML 1.2's core schema for numbers (PyYAML speaks YAML 1.1, where 010 is 8, 1_000 is
# 1000 and 1e3 is a string)
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where built in


class _Loader(_BASE):
    """The safe loader (libyaml's parser when PyYAML has it: ten times faster on a
    megabyte of topology) with YAML 1.2 numbers. Aliases and nesting are checked on the
    events first (_check_events), before anything is composed."""

    yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag not in _NUMBER_TAGS]
                               for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def construct_mapping(self, node, deep=False):
        """A mapping, refusing a key given twice (YAML would keep the last silently)."""
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: the key "
                                         f"{quote(key)} is given twice")
                seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node).lower()
        return float(text.replace(".inf", "inf").replace(".nan", "nan"))


_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _check_events(text: str) -> None:
    """No aliases (a few hundred bytes of nested ones expand to gigabytes), at most
    MAX_DEPTH levels of nesting: checked on the parser's events, in one pass."""
    depth = 0
    for event in yaml.parse(text, Loader=_BASE):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: aliases (*name) are "
                                 "not allowed")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.YAMLError(f"line {event.start_mark.line + 1}: nested more than "
                                     f"{MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def load_yaml(path: str | Path, limit: int = TEXT_LIMIT, what: str = "file"):
    """The document in a YAML (or JSON) file; BadInput names the line of a problem."""
    return parse_yaml(read_text(path, limit, what), path)


def parse_yaml(text: str, path: str | Path = "YAML"):
    """The document in YAML text, read as load_yaml reads a file (`path` names it)."""
    try:
        _check_events(text)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" (line {mark.line + 1})" if mark else ""
        kind = "JSON" if os.fspath(path).lower().endswith(".json") else "YAML"  # read as YAML
        raise BadInput(f"{quote(os.fspath(path), 80)}: not valid {kind}{where}") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{quote(os.fspath(path), 80)}: {e}") from None
    except ValueError:  # an integer of more than 4300 digits
        raise BadInput(f"{quote(os.fspath(path), 80)}: a number too long to read") from None
    except RecursionError:
        raise BadInput(f"{quote(os.fspath(path), 80)}: nested too deeply") from None


def load_json(path: str | Path, limit: int = SCHEDULE_LIMIT, what: str = "file"):
    """The document in a JSON file; BadInput when it is not one."""
    text = read_text(path, limit, what)
    return parse_json(text, quote(os.fspath(path), 80))


def parse_json(text: str, name: str = "JSON"):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{name}: not valid JSON (line {e.lineno})") from None
    except ValueError:  # a number of more than 4300 digits
        raise BadInput(f"{name}: a number too long to read") from None
    except RecursionError:
        raise BadInput(f"{name}: nested too deeply") from None
