"""Whose files an output folder holds, and which of them synth may remove.

`synth COLLECTIVE -o OUT` writes into OUT/TOPO/COLLECTIVE. Two things keep a user's
files safe there:

- OUT/TOPO holds a marker (MARKER) with the topology's name and a fingerprint of the
  machine itself: a folder another machine of the same safe name wrote (two files
  named `box.yaml`, a file named `dgxh100`) is never reused; that machine's files go to
  a folder of their own (the name and a hash).
- OUT/TOPO/COLLECTIVE holds a manifest (MANIFEST) of the files synth wrote there, each
  with the identity it had when written (inode, size, status-change and modification
  times; in a copy of the folder, size and modification time alone). Only a file
  in the manifest and unchanged since is ever removed as an earlier run's, or written
  over whatever it holds. Any other file, the user's, one they edited, copied or
  replaced, or one of a run before the manifest (nothing tells these apart: a copy
  resets every time), is written over only where it already holds the very bytes being
  written (nothing is lost), else moved aside first (keep_aside: NAME.kept), and never
  removed.

A lost or unreadable manifest costs nothing but stale files left in place and files
kept aside. Cost: the fingerprint reads every vertex and physical link once; the
manifest is one small file read and written per write.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from synth.errors import BadInput
from synth.files import (OutputError, check_folder, inside, inside_without_links,
                         make_folders, quote, read_text, safe_component, write_atomic,
                         write_folder)
from synth.topology.physical import Topology

MARKER = ".topology-name"  # in OUT/TOPO: the topology's name, then its fingerprint
MANIFEST = ".written-by-synth"  # in OUT/TOPO/COLLECTIVE: {name: identity}


def fingerprint(topo: Topology) -> str:
    """A short hash of the machine: its unit, vertices and physical links. Made once
    per topology object (fc:1100's 1.2 million links take 2 s)."""
    if _MADE.get(id(topo), (None,))[0] is not topo:
        body = repr((topo.unit_gbps, sorted((v.name, v.kind, v.box, v.can)
                                            for v in topo.vertices),
                     sorted((l.src, l.dst, l.gbps, l.count, l.alpha_us)
                            for l in topo.links)))
        while len(_MADE) >= 4:  # the last few only: a process may resolve thousands
            del _MADE[next(iter(_MADE))]
        _MADE[id(topo)] = (topo, hashlib.sha256(body.encode()).hexdigest()[:16])
    return _MADE[id(topo)][1]


# id -> (the topology, kept alive so that its id is not reused; its hash)
_MADE: dict[int, tuple[Topology, str]] = {}


def owner_text(topo: Topology) -> str:
    """The marker's text for `topo`."""
    return f"{topo.name}\n{fingerprint(topo)}\n"


def output_dir(root: str | Path, topo: Topology, collective: str) -> Path:
    """OUT/TOPO/COLLECTIVE, the topology name made one safe path component
    (synth.files.safe_component: ring:4 -> ring_4; '..' or 'a/b' never lead out of OUT,
    and two names never share a folder), with a hash of the name where another machine
    of that safe name holds it already."""
    if not str(root):
        raise BadInput("--out: an empty folder name")
    name = safe_component(topo.name)
    hashed = f"{name}-{hashlib.sha256(owner_text(topo).encode()).hexdigest()[:8]}"
    # ring:4 and a file 'ring_4'; two files box.yaml; a folder whose marker went
    if _holds(Path(root) / hashed, topo) or not _owned_by(Path(root) / name, topo):
        name = hashed
    check_folder(Path(root) / name / collective)
    return inside(root, Path(root) / name / collective)


def _owned_by(folder: Path, topo: Topology) -> bool:
    """Whether the folder is free for `topo` (none yet, or empty) or holds its files:
    its marker names it, with the same fingerprint (a marker of before 2026-12-05 has
    none). A folder with files and no marker is nobody's to reuse."""
    try:
        if not folder.is_dir() or not any(folder.iterdir()):
            return True
    except OSError:
        return False
    return _holds(folder, topo)


def _holds(folder: Path, topo: Topology) -> bool:
    """Whether the folder's marker says it holds `topo`'s files."""
    try:
        lines = read_text(folder / MARKER, 4096, "marker").splitlines()
    except BadInput:
        return False
    return bool(lines) and lines[0].strip() == topo.name and (
        len(lines) < 2 or lines[1].strip() == fingerprint(topo))


def _identity(path: Path) -> list[int] | None:
    """inode, size, status-change time and (since 2026-12-06) modification time: an
    edit, a copy over it, a chmod all change it (a read does not). A copy of the folder
    that keeps times (`cp -a`) keeps the size and modification time alone."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns]


def _same(entry: list, identity: list[int] | None, moved: bool) -> bool:
    """Whether a manifest entry is the file as it is now: all of it (an entry of before
    2026-12-06 has no modification time); in a manifest copied from another folder,
    the size and modification time, which a copy keeping times keeps and an edit or a
    copy that does not (`cp -r`) changes."""
    if identity is None or not all(type(x) is int for x in entry):
        return False  # an entry synth did not write vouches for nothing
    if moved:  # a copy keeping times to the second only (tar, zip) has no nanoseconds
        return len(entry) == 4 and entry[1] == identity[1] and (
            entry[3] == identity[3] or identity[3] % 10**9 == 0
            and entry[3] // 10**9 == identity[3] // 10**9)
    return entry == identity[:len(entry)] and len(entry) >= 3


@dataclass
class Manifest:
    files: dict[str, list[int]]  # {path from the folder: identity as synth wrote it}
    moved: bool = False  # written in another folder (copied with it): _same


def manifest_of(directory: Path) -> Manifest | None:
    """The files synth wrote in `directory`; None where it has no manifest at all (a
    folder of before 2026-12-05, one copied without dotfiles, or its manifest deleted).
    One written in another folder (copied with it: every file has a new inode) is
    `moved`, its entries matched by size and modification time (_same)."""
    if not os.path.lexists(directory / MANIFEST):
        return None
    try:
        doc = json.loads(read_text(directory / MANIFEST, 1 << 24, "manifest"))
        files, folder = doc["files"], doc.get("folder")  # a 2026-12-06 created_ns: unread
        if "folder" in doc and not (isinstance(folder, list) and len(folder) == 2
                                    and all(type(x) is int for x in folder)):
            return Manifest({})
        return Manifest({str(k): list(v) for k, v in files.items()}
                        if isinstance(files, dict) else {},
                        folder is not None and folder != _folder_identity(directory))
    except (BadInput, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return Manifest({})  # not one synth wrote: nothing is known to be synth's


def record(directory: Path, written: list[Path], removed: list[Path] = ()) -> None:
    """Add the files just `written` under `directory` to its manifest (their identity as
    they are now; keyed by their path from `directory`), and drop the `removed` ones."""
    manifest = manifest_of(directory) or Manifest({})
    files = manifest.files
    if manifest.moved:  # from now on this folder's: its copies as they are here
        files = {name: _identity(directory / name) for name, entry in files.items()
                 if _same(entry, _identity(directory / name), True)}
    for path in removed:
        files.pop(_key(directory, path), None)
    for path in written:
        identity = _identity(path)
        if identity is not None and _key(directory, path):
            files[_key(directory, path)] = identity
    manifest.files = {name: v for name, v in files.items() if os.path.lexists(directory / name)}
    _write_manifest(directory, manifest)


def _write_manifest(directory: Path, manifest: Manifest) -> None:
    write_atomic(directory / MANIFEST, json.dumps({"format": "synth.written",
                                                   "folder": _folder_identity(directory),
                                                   "files": manifest.files}) + "\n",
                 follow_links=False)


def _folder_identity(directory: Path) -> list[int]:
    """The folder's device and inode: a copy of it has others (a rename keeps them)."""
    st = os.stat(directory)
    return [st.st_dev, st.st_ino]


def written_by_synth(directory: Path, path: Path, manifest: Manifest) -> bool:
    """Whether `path` is a file synth wrote under `directory`, unchanged since (its
    manifest entry)."""
    key = _key(directory, path)
    entry = manifest.files.get(key) if key is not None else None
    return entry is not None and _same(entry, _identity(path), manifest.moved)


def _key(directory: Path, path: Path) -> str | None:
    try:
        return Path(path).relative_to(directory).as_posix()
    except ValueError:  # not under it
        return None


def users_file(directory: Path, path: Path, manifest: Manifest | None,
               data: str | bytes | None = None) -> bool:
    """Whether `path`, a regular file there now, must not be written over or removed as
    synth's: the manifest (None: the folder has none) does not list it as synth wrote
    it, and it does not hold `data`, the bytes about to be written at its name (writing
    those over it loses nothing; None: it is to be removed, which would). Whose a file
    the manifest does not vouch for is, nothing says: the user's, an edit, a copy, or a
    file of a run before the manifest; its bytes alone tell what writing over it loses."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False  # a link at the name is replaced, its target left alone
    if written_by_synth(directory, path, manifest or Manifest({})):
        return False
    return data is None or not _same_bytes(path, data.encode() if isinstance(data, str)
                                           else data, st.st_size)


def _same_bytes(path: Path, data: bytes, size: int) -> bool:
    """Whether the file of `size` bytes at `path` holds exactly `data`."""
    if size != len(data):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(size + 1) == data
    except OSError:
        return False


def keep_aside(path: Path, into: Path | None = None) -> Path:
    """Move the file at `path` to the first free NAME.kept, NAME.kept-2, ... in the
    folder `into` (one that exists; None: beside it), so that this run can write `path`
    and nothing of the user's is lost."""
    for n in range(1, 10_000):
        spare = (into or path.parent) / (f"{path.name}.kept" + (f"-{n}" if n > 1 else ""))
        if not os.path.lexists(spare):
            try:
                os.rename(path, spare)
            except OSError as e:
                raise OutputError(f"cannot keep {path} aside before writing it: "
                                  f"{e.strerror or e}") from None
            return spare
    raise BadInput(f"{quote(str(path), 80)}: too many kept copies beside it")


def write_guarded(directory: Path, files: dict, aside_in=lambda rel: None,
                  also_aside: list = ()) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """synth.files.write_folder (all or none), a user's file at a name it writes moved
    aside first (users_file: one the manifest does not vouch for that differs from what
    is written there), and the files `also_aside` names too (paths from `directory`),
    each into the folder aside_in(its path) names, or beside it where that is None; all
    moved back if the folder, or its manifest listing the files, cannot be written.
    Every path and folder is checked before anything moves (synth.files.
    inside_without_links: nothing outside `directory` is touched). Returns (the paths
    written, (path, where it went) of each file moved aside)."""
    directory, ours = Path(directory), manifest_of(Path(directory))
    place = {rel: (inside_without_links(directory, Path(rel)), aside_in(rel))[1]
             for rel in list(files) + list(also_aside)}  # all checked before any move
    moved, made = [], []
    try:
        for rel in [r for r in files if users_file(directory, directory / r, ours, files[r])
                    ] + list(also_aside):
            if place[rel] is not None:
                try:
                    made += make_folders(place[rel])
                except OSError as e:
                    raise OutputError(f"cannot make {place[rel]} to keep a file aside: "
                                      f"{e.strerror or e}") from None
            moved.append((directory / rel, keep_aside(directory / rel, place[rel])))
        written = write_folder(directory, files)
        record(directory, written)
    except BaseException:  # the user's files back in place, the folder as it was
        for path, aside in moved:
            os.replace(aside, path)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    return written, moved
