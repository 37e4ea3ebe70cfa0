"""Files written while the search goes on (anytime): the frontier in hand, in JSON, as
soon as the search hands it over, so that the best schedule so far is on disk minutes
before the job ends (packed trees reach the bound in a second or two where the exact
search then runs for the rest of the limit).

Only new names are written early: a file already there (an earlier run's, another
run's, a link) is left to the last write, which keeps its rules for them. The job's last
write (synth.output.write_points) is the frontier: an early file whose point is still on
it is that point's file (not written again). Once every point of the frontier has its
file, this run's early files no longer on it, unchanged since, are removed; a file
another program has changed or replaced since is never removed. Where the last write
left a point unwritten, or failed, every early file stays (each a verified schedule).
"""

from __future__ import annotations

import os
from pathlib import Path

from synth.deadline import Deadline
from synth.files import OutputError
from synth.output import point_stem, write_points
from synth.output_folder import record
from synth.search.pareto import Point


class EarlyFiles:
    """The early files of one run into `directory` (JSON only: the runtimes' formats
    are rendered at the end, where the time for them is held)."""

    def __init__(self, directory: Path, started_ns: int, deadline: Deadline, say=None,
                 owner: str | None = None):
        self.directory, self.started_ns, self.deadline = directory, started_ns, deadline
        self.owner = owner  # the folder's marker (synth.output_folder.owner_text)
        self.say = say or (lambda text: None)
        # id(schedule) -> (the schedule, kept so its id is not reused; file; identity)
        self.files: dict[int, tuple[object, Path, tuple]] = {}
        self.failed = False  # a write failed: no more until the last one

    def write(self, points: list[Point]) -> None:
        """Write each of `points` not written yet, as the time left affords it."""
        new = [p for p in points if id(p.schedule) not in self.files
               and not os.path.lexists(self.directory / f"{point_stem(p)}.json")]
        if not new or self.failed or self.deadline.passed():
            return
        wrote = 0
        for p in new:  # one by one: each file written is known, whatever fails after it
            try:
                path, = write_points([p], self.directory, ["json"], None, self.started_ns,
                                     self.deadline, owner=self.owner)
            except OutputError:  # a full disk: the job's last write says so, after its table
                self.failed = True
                break
            if path is not None:
                self.files[id(p.schedule)] = (p.schedule, path, _identity(path))
                wrote += 1
        if wrote:
            self.say(f"  wrote {wrote} point{'s' * (wrote != 1)} found so far to "
                     f"{self.directory} (the search goes on)")

    def intact(self) -> dict[int, Path]:
        """{id(schedule): its early file} for the files unchanged since written: the
        last write need not write them again (at 1024 GPUs a file is tens of MB)."""
        return {key: path for key, (_, path, identity) in self.files.items()
                if _identity(path) == identity}

    def settle(self, paths: list[Path | None]) -> None:
        """Remove each early file, unchanged since, that is not among `paths` (the last
        write's: the frontier's files), unless some point has none."""
        if None in paths:
            return
        kept, removed = set(paths), []
        for _, path, identity in self.files.values():
            if path not in kept and _identity(path) == identity:
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:  # removed meanwhile: nothing to do
                    pass
        if removed:
            record(self.directory, [], removed)


def _identity(path: Path) -> tuple:
    """What tells this run's file from one written over it since: inode, size, mtime."""
    try:
        st = os.lstat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns)
