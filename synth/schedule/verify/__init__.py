"""Independent schedule verifier: simulate a schedule file and check it.

Implements docs/schedule-file.md (the format, versions 1 to 4, the chunk numbering and
the semantics). It shares no code with the rest of synth on purpose: an encoder or a
construction bug must not be able to hide behind a helper that the verifier also
trusts. Only the standard library and synth.errors.

Version 2 files are checked without unrolling them:
- Ranges: a send of `count` chunks is cut at every boundary any send's range has, so
  each piece (an elementary interval) is moved by exactly the same sends; one chunk per
  piece is simulated, standing for all of it.
- Pipelines: batch b runs the program on chunks shifted by b x stride. Once every
  shifted chunk stays in its share (so it has the same holders and wanters) and no two
  batches touch one chunk (so no batch sees another's data), every batch's data flow is
  batch 0's: batch 0 is simulated, and the union of the batches must reach every chunk
  the postcondition needs. Capacity is checked per expanded step on the loads of the
  batches active in it, kept as a sliding sum over the program's steps.
So time and memory grow with the program and the number of steps, not with chunks x
batches.

Version 4 files (written once per orbit of a group of rank translations) are checked
without unfolding them either.

The rooms: document.py reads a file into the verifier's terms (MalformedSchedule),
flow.py simulates it and checks it (ScheduleInvalid), orbits.py checks version 4 files
and group.py is their group arithmetic; this module puts them in order.
"""

import json
import os
import stat

from synth.schedule.verify.document import (_TABLE, MalformedSchedule, ScheduleInvalid, _cut,
                                            _ranks, parse)
from synth.schedule.verify.flow import (_check_expanded_loads, _check_pipeline, _check_post,
                                        _check_table, _check_version, _pieces, _share_size,
                                        _touched, as_every_batch, simulate)
from synth.schedule.verify.orbits import _verify_orbits

__all__ = ["MalformedSchedule", "ScheduleInvalid", "parse", "simulate", "verify_file",
           "verify_schedule"]


def verify_schedule(doc):
    """Return None if doc is a valid schedule; raise MalformedSchedule or ScheduleInvalid."""
    s = parse(doc)
    if s.symmetry is not None:
        return _verify_orbits(s, doc)
    _check_version(s)
    _check_table(s)
    per = _share_size(s)
    cuts = _pieces(s, per)
    spans, covered = _touched(cuts, s, per)
    if s.pipeline is not None:
        _check_pipeline(s, spans, per)
    # combining: each holder starts with its own contribution only, a bit mask (unions
    # and disjointness of hundreds of ranks are single integer operations); only the
    # first chunk of every piece is simulated
    _, pre_kind, _ = _TABLE[s.collective]
    own = {rank: 1 << rank for rank in range(s.n)}
    state = {(rank, k): own[rank] for k in covered
             for rank in _ranks(pre_kind, k, s.n, s.c, s.root)}
    with as_every_batch(s):
        simulate(s, state, cuts)
    _check_post(s, state, spans, covered, per)
    if s.pipeline is not None:
        _check_expanded_loads(s)



MAX_FILE_BYTES = 128 << 20  # a schedule file larger than this is refused unread


def verify_file(path):
    """Read a schedule JSON file, verify it and return the document. Only a regular file
    of at most MAX_FILE_BYTES is read (a pipe or /dev/zero would never end)."""
    name = _cut(os.fspath(path), 120)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise MalformedSchedule(f"{name}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise MalformedSchedule(f"{name}: {st.st_size:,} bytes, over the "
                                    f"{MAX_FILE_BYTES:,}-byte limit")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        doc = json.loads(text)
    except json.JSONDecodeError as e:  # the decoder's words name no file kind
        xml = " (MSCCL XML: verify the schedule .json it was exported from)" \
            if text.lstrip().startswith("<") else ""
        raise MalformedSchedule(f"{name}: cannot read a schedule: not valid JSON (line "
                                f"{e.lineno}){xml}") from None
    except (OSError, ValueError) as e:  # ValueError: bad UTF-8, 5000 digits
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise MalformedSchedule(f"{name}: cannot read a schedule: {_cut(reason, 120)}"
                                ) from None
    except RecursionError:
        raise MalformedSchedule(f"{name}: cannot read a schedule: nested too deeply"
                                ) from None
    verify_schedule(doc)
    return doc
