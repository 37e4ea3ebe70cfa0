"""A plan's files: per runtime a loadable set of algorithms with size ranges, the chosen
schedules, plan.json and report.md.

    DIR/plan.json                     the plan (machine-readable; `files` lists the rest)
    DIR/report.md, DIR/report.html    the report: per call the choice against NCCL's
                                      (the page shows the plots, with them)
    DIR/schedules/COMM/COLL-I.json    each chosen schedule, and every runtime file's
                                      (plan.json's `schedule` of each file; synth verify
                                      reads them)
    DIR/msccl/COMM/COLL-I.xml         MSCCL XML, minBytes..maxBytes per file
    DIR/mscclpp/COMM/COLL-I.mscclpp.json, DIR/mscclpp/register.py
                                      MSCCL++ plans and their registration
    DIR/plots/*.png                   with plots

(COLL carries `-rootR` for a rooted collective.) A runtime runs a file only for a
message it cuts into whole chunks (synth.export.units). Each runtime's ranges tile 0 bytes .. no
limit: the lower envelope of the candidates it can express and of NCCL's own (ring,
tree or direct, which take any size and need no file); a workload size the range's file
cannot cut goes to the fastest that can, NCCL's own at worst; past an MSCCL++ plan's
32-bit offsets, and past the workload's largest size for an XML file (no file says "no
limit": microsoft/msccl reads maxBytes literally), NCCL's own; an MSCCL++ plan never
starts at 2^31 bytes or more (min_message_size is a 32-bit int to the executor). A
file's upper bound is written one byte past its range (`_upper`): microsoft/msccl and
MSCCL++ v0.8.0's shim read it exclusively, the others inclusively, so both run every
size of the range; no workload size sits on that extra byte unless the file is the one
for it (`_after_overlaps`). The envelope in plan.json is over every candidate (what the
model predicts). Everything is rendered (and simulated) before the first file is
written; the files are written all or none (synth.files.write_folder).
"""

from __future__ import annotations

import json
import stat
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

from synth.construct.paced import WRITE, export_size
from synth.deadline import Deadline, OutOfTime
from synth.errors import BadInput
from synth.export import render
from synth.export.mscclpp import MAX_MIN_MESSAGE
from synth.export.units import unit_of
from synth.files import check_folder, inside_without_links
from synth.output_folder import Manifest, manifest_of, record, users_file, write_guarded
from synth.plan.document import plan_document, ranks_per_node, runtime_steps, within_range
from synth.plan.page import plan_page
from synth.plan.report import report_text
from synth.plan.planner import Entry, Plan, envelope, preference, typical
from synth.schedule.cost import MAX_SIZE
from synth.schedule.file import schedule_json, schedule_to_dict

RUNTIMES = {"msccl-xml": ("msccl", ".xml"), "mscclpp": ("mscclpp", ".mscclpp.json")}


def entry_stem(e: Entry) -> str:
    return e.collective + (f"-root{e.root}" if e.root is not None else "")


def protected_sizes(entry: Entry) -> list[int]:
    """The workload sizes a runtime's ranges must give to something that cuts them: each
    call's size, and for a call over a range its ends, its middle and the powers of two
    in it (the sizes messages come in)."""
    sizes = set()
    for c in entry.calls:
        sizes |= {c.low, c.high, typical(c)}
        k = max(c.low, 1).bit_length() - 1
        while (1 << k) <= c.high:
            if (1 << k) >= c.low:
                sizes.add(1 << k)
            k += 1
    return sorted(sizes)


_RENDERED: OrderedDict = OrderedDict()  # (schedule, fmt, protocol) -> text or None
_KEEP = 160  # a plan's candidates in both formats


# PyTorch calls these in place (DDP's buckets, FSDP2's all-gather, whose input is a
# view of its output), and the runtimes and SynthComm take a file only in the form of
# the call (docs/runtimes.md, "PyTorch"): a plan's files of them are written in place
IN_PLACE = ("allreduce", "allgather")


def _rendered(schedule, fmt: str, protocol: str = "Simple",
              deadline: float | None = None, inplace: bool = False) -> str | None:
    """The file `fmt` holds for `schedule`, or None where the runtime cannot express
    it. Kept: a plan's report, its files and the next plan of the same candidates
    (equal schedules) render each once. An export and its simulation can take tens of
    seconds on 16 GPUs, so one not yet rendered starts only if, at the pace measured so
    far (synth.construct.paced.WRITE), it ends before `deadline` (time.monotonic()), and
    stops there (the pace of one kind of export says little of another's: a 16-channel
    ring on dgxh100x2 took 28 s where its size said a tenth of a second); else
    OutOfTime."""
    key = (schedule, fmt, protocol, inplace)
    if key in _RENDERED:
        _RENDERED.move_to_end(key)
        return _RENDERED[key]
    units = export_size(schedule)
    if deadline is not None and time.monotonic() + WRITE[fmt].seconds(units) > deadline:
        raise OutOfTime(f"no time to export to {fmt}")
    with WRITE[fmt].timing(units):
        try:
            text = render(schedule, fmt, inplace, protocol=protocol,
                          deadline=Deadline.of(deadline))[0]
        except BadInput:
            text = None
    _RENDERED[key] = text
    while len(_RENDERED) > _KEEP:
        _RENDERED.popitem(last=False)
    return text


def runtime_files(entry: Entry, fmt: str, deadline: float | None = None,
                  skipped: list | None = None) -> list[dict]:
    """The runtime's ranges for one entry, in size order, tiling 0 bytes .. no limit:
    dicts of min_bytes, max_bytes (inclusive, None: no limit; the file's own upper
    bound is one past it: _upper), algorithm, candidate, unit and text;
    where NCCL's own algorithm runs instead, candidate, unit and text are None and no
    file is written (module docstring). A candidate whose export would not end by
    `deadline` (time.monotonic()) at the pace measured so far is not exported (an
    export and its simulation can take tens of seconds on 16 GPUs): their labels go to
    `skipped`, and NCCL's own runs what they would have."""
    # largest: the most a file may serve: an MSCCL++ plan's 32-bit offsets' limit; an
    # XML file, the workload's largest size (microsoft/msccl reads maxBytes literally and
    # allocates scratch for it at start, so no file says "no limit")
    units, largest = _exported(entry, fmt, deadline, skipped)
    own = [replace(c, label=f"NCCL's own ({c.label})" if entry.modelled_nccl
                   else "NCCL's own (not modelled here)") for c in entry.reference]
    files = [c for c in entry.candidates if id(c) in units]
    # NCCL's own competes where it is modelled; where it is not (no NCCL-style baseline
    # here), it only takes what no file can
    spans = envelope(files + own if entry.modelled_nccl else files or own, 1)

    def cuts(c, n):  # NCCL's own takes any size; a file, whole chunks within its limit
        return id(c) not in units or (units[id(c)].cuts(n) and n <= largest.get(id(c), n))

    def fastest(n):  # a file beats NCCL's own where it beats what NCCL runs at n
        able = [c for c in files if cuts(c, n)]
        # of files equally fast at n, the envelope's own there: any other would split
        # its span (a tie broken two ways left a one-byte range)
        here = next((s.candidate for s in spans if within_range(s.low, s.high, n)), None)
        mine = min(able, key=lambda c: (c.time_us(n), c is not here, preference(c, n))) \
            if able else None
        if mine is not None and not entry.modelled_nccl:
            return mine
        theirs = _nccl_runs(entry, own, n)
        return mine if mine is not None and mine.time_us(n) < theirs[1] else theirs[0]

    pieces = []  # (low, high, candidate), then split where a protected size is uncut
    for span in spans:
        top = largest.get(id(span.candidate))
        if top is not None and (span.high is None or span.high > top):
            if span.low <= top:
                pieces.append((span.low, top, span.candidate))
            pieces.append((max(span.low, top + 1), span.high, fastest(top + 1)))
        else:
            pieces.append((span.low, span.high, span.candidate))
    pieces[0] = (0,) + pieces[0][1:]
    for n in protected_sizes(entry):  # each workload size to its fastest, exactly
        want = fastest(n)
        for k, (low, high, c) in enumerate(pieces):
            if within_range(low, high, n) and not _same_choice(c, want, units):
                # a file beats what NCCL runs around n too, not at n alone (the ranges'
                # lines are NCCL's at full channels: a 1-byte range at 80 MB left 64 MB,
                # 1.07 x faster with the file, to NCCL)
                a, b = (n, n) if id(want) not in units else \
                    _beating(entry, own, want, low, n, high)
                b = min(b, largest.get(id(want), b))  # never past what its file may serve
                pieces[k:k + 1] = [x for x in ((low, a - 1, c), (a, b, want),
                                               (b + 1, high, c))
                                   if x[1] is None or x[1] >= x[0]]
                break
    # neighbours with one option are one range; a file ending at 0 bytes is no range (0
    # means "no limit" to the runtimes), nor an MSCCL++ plan starting where its
    # min_message_size would wrap: NCCL's own takes those
    def loadable(ranges):
        return _merged([(low, high, c) if id(c) not in units or (
            high != 0 and (fmt != "mscclpp" or low <= MAX_MIN_MESSAGE))
            else (low, high, min(own, key=lambda o: o.time_us(max(low, 1))))
            for low, high, c in ranges])

    merged = loadable(_after_overlaps(loadable(_merged(pieces)), protected_sizes(entry),
                                      lambda c: id(c) in units, cuts))
    out = []
    for i, (low, high, c) in enumerate(merged):
        if id(c) not in units:
            out.append({"min_bytes": low, "max_bytes": high, "algorithm": c.label,
                        "candidate": None, "unit": None, "text": None})
            continue
        text = render(c.schedule, fmt, entry.collective in IN_PLACE,
                      name=f"synth-plan-{entry.communicator}-"
                      f"{entry_stem(entry)}-{i}", min_bytes=low,
                      max_bytes=_upper(high, fmt, largest[id(c)]), protocol=c.protocol)[0]
        out.append({"min_bytes": low, "max_bytes": high, "algorithm": c.label,
                    "candidate": c, "unit": units[id(c)], "text": text})
    return out


def _nccl_runs(entry: Entry, own: list, n: int):
    """(NCCL's own option that runs n bytes, its time at n): in cost model 2 its tuner's
    choice timed exactly at n (Entry.nccl: the channels it launches there), not the
    option's line at full channels, which is faster than NCCL runs (at 64 MiB on one
    H100 box nvls/Simple's line said 267.9 us, NCCL's choice 328.1, and the plan gave
    NCCL a size a 303.9 us file ran faster); else the fastest option at n."""
    if entry.machine is None or not entry.modelled_nccl:
        pick = min(own, key=lambda c: c.time_us(n))
        return pick, pick.time_us(n)
    runs = entry.nccl(n)
    label = f"NCCL's own ({runs.label})"
    return next((c for c in own if c.label == label), own[0]), runs.time_us(n)


def _beating(entry: Entry, own: list, want, low: int, n: int, high: int | None
             ) -> tuple[int, int]:
    """The sizes about n, within low..high, where `want` (a file, fastest at n) is faster
    than what NCCL runs there: the largest such run of sizes through n, its ends found
    by bisection (one crossing each side, as a line and NCCL's near choices meet)."""
    def faster(m):
        return want.time_us(m) < _nccl_runs(entry, own, m)[1]

    def edge(inside, outside):  # the last size from `inside` towards `outside` that wins
        while abs(outside - inside) > 1:
            mid = (inside + outside) // 2
            inside, outside = (mid, outside) if faster(mid) else (inside, mid)
        return inside

    top = high if high is not None else min(MAX_SIZE, 2 * n + 1)
    a = low if faster(low) else edge(n, low)
    b = top if faster(top) and high is not None else edge(n, top + 1)
    return max(a, low), b


def _same_choice(c, want, units: dict) -> bool:
    """Whether a range's candidate `c` is the choice `want`: the same file, or both
    NCCL's own (whichever option: no file is written for either)."""
    return c is want or (id(c) not in units and id(want) not in units)


def _exported(entry: Entry, fmt: str, deadline: float | None, skipped: list | None
              ) -> tuple[dict, dict]:
    """({id(candidate): its file's Unit}, {id(candidate): the largest size its file may
    serve}) for the candidates `fmt` can express whose export ends before `deadline`
    (_rendered); the others' labels go to `skipped`."""
    units, largest = {}, {}
    biggest = max((call.high for call in entry.calls), default=0)
    for c in entry.candidates:
        try:
            text = _rendered(c.schedule, fmt, c.protocol, deadline,
                             entry.collective in IN_PLACE)
        except OutOfTime:
            if skipped is not None:
                skipped.append(c.label)
            continue
        if text is None:
            continue
        units[id(c)] = unit_of(fmt, text, entry.library)
        largest[id(c)] = json.loads(text)["max_message_size"] if fmt == "mscclpp" \
            else biggest
    return units, largest


def _merged(pieces: list) -> list:
    """(low, high, candidate) pieces in order, neighbours of one candidate joined."""
    out = []
    for low, high, c in pieces:
        if out and out[-1][2] is c and out[-1][1] == low - 1:
            out[-1] = (out[-1][0], high, c)
        else:
            out.append((low, high, c))
    return out


def _after_overlaps(pieces: list, sizes, is_file, cuts) -> list:
    """(low, high, candidate) pieces with no workload size on the byte after a file's
    range. A file's upper bound is written one past its range (_upper), and the runtimes
    that read it inclusively run the file for that byte too, as they run the next
    range's file there: whichever they loaded first. So a workload size there that the
    file cuts is given to it (its range grows by that byte, the next one's shrinks), and
    one it does not cut is kept off its bound (its range shrinks by a byte): neither
    order of loading then gives a workload size to a file that does not cut it."""
    sizes, out = set(sizes), [list(p) for p in pieces]
    i = 0
    while i < len(out) - 1:
        low, high, c = out[i]
        n = high + 1
        if is_file(c) and n in sizes and cuts(c, n):
            out[i][1], out[i + 1][0] = n, n + 1
            if out[i + 1][1] is not None and out[i + 1][1] < out[i + 1][0]:
                del out[i + 1]  # it was that one size
            continue
        if is_file(c) and n in sizes:  # one it cannot cut: its bound must not be on it
            out[i][1], out[i + 1][0] = high - 1, high  # (ring:8's allgather at 3,000,000:
            if out[i][1] < out[i][0]:                  # the executor threw there)
                del out[i]
                continue
        i += 1
    return _merged([tuple(p) for p in out])


def _upper(high: int | None, fmt: str, limit: int) -> int | None:
    """The upper bound written in the file of a range ending at `high` (inclusive; None:
    no limit): one past it, so that microsoft/msccl and MSCCL++ v0.8.0's shim, which read
    it exclusively (size < bound), run `high` too, and the inclusive readers one byte more
    (_after_overlaps); an MSCCL++ plan's at most its `limit` (its 32-bit offsets')."""
    if high is None:
        return 0 if fmt == "msccl-xml" else None  # XML: 0 is no limit
    return high + 1 if fmt == "msccl-xml" else min(high + 1, limit)


def render_plan(plan: Plan, formats=tuple(RUNTIMES), extra: dict | None = None,
                deadline: float | None = None) -> tuple[dict, dict]:
    """({path in DIR: text or bytes}, plan.json's document): everything, rendered and
    simulated, before anything is written; `extra` files (the plots) join the list.
    Candidates not exported by `deadline` are listed in the document's
    `not_exported` (runtime_files)."""
    texts, runtime = {}, {}
    for e in plan.entries:
        schedules: dict[int, str] = {}  # id(schedule) -> its file under schedules/

        def schedule_file(schedule) -> str:
            """The schedule's file, written once: a runtime file's schedule, where no
            span has it (a power-of-two-lanes variant), had none, and the stems of
            msccl/, mscclpp/ and schedules/ are numbered apart (plan.json names it)."""
            if id(schedule) not in schedules:
                path = Path("schedules") / e.communicator / \
                    f"{entry_stem(e)}-{len(schedules)}.json"
                texts[path] = schedule_json(schedule_to_dict(schedule))
                schedules[id(schedule)] = str(path)
            return schedules[id(schedule)]

        for span in e.spans:
            schedule_file(span.candidate.schedule)
        for fmt in dict.fromkeys(formats):
            folder, ext = RUNTIMES[fmt]
            skipped: list = []
            files = runtime_files(e, fmt, deadline, skipped)
            for i, f in enumerate(files):
                text = f.pop("text")
                f["file"] = None if text is None else \
                    str(Path(folder) / e.communicator / f"{entry_stem(e)}-{i}{ext}")
                f["schedule"] = None if text is None else \
                    schedule_file(f["candidate"].schedule)
                if text is not None:
                    texts[Path(f["file"])] = text
            runtime.setdefault(fmt, []).append({"communicator": e.communicator,
                                                "collective": e.collective,
                                                "root": e.root, "files": files,
                                                "not_exported": skipped})
    if "mscclpp" in runtime:
        texts[Path("mscclpp") / "register.py"] = _register(plan, runtime["mscclpp"])
    texts.update(extra or {})
    loaded = runtime_steps(plan, runtime)
    doc = plan_document(plan, runtime, loaded)
    doc["files"] = sorted(str(p) for p in texts) + ["plan.json", "report.md", "report.html"]
    texts[Path("report.md")] = report_text(plan, runtime, loaded)
    texts[Path("report.html")] = plan_page(texts[Path("report.md")], extra or {})
    texts[Path("plan.json")] = json.dumps(doc, indent=1) + "\n"
    return texts, doc


def write_files(out: Path, texts: dict, keep: list[str]) -> tuple[list, list]:
    """Write every file, all or none (synth.files.write_folder: a full disk leaves `out`
    as it was), plan.json last; then remove the files an earlier plan listed that are
    not in `keep`. Only synth's own files, as it wrote them, are written over or removed
    (the folder's manifest, synth.output_folder; any other file is written over only
    where it holds the bytes written there): a file of the user's at a name the plan
    writes is moved aside first, and an earlier plan's file it does not write that is
    not synth's as it wrote it is moved aside too, where the runtimes' folders hold it
    (a runtime loads every file of its folder: it would run the old file) into KEPT,
    out of their way. Returns ((path, where it went) of each earlier plan's file moved
    aside, and of each file moved aside from a name this plan writes)."""
    out = Path(out)
    ours = manifest_of(out)  # as it was before this plan
    removable, left = _stale(out, _earlier_files(out), set(keep), ours)
    ordered = sorted(texts.items(), key=lambda item: Path(item[0]) == Path("plan.json"))
    _, moved = write_guarded(out, dict(ordered), lambda rel: _aside_in(out, rel), left)
    for path in removable:
        path.unlink(missing_ok=True)
    if removable:
        record(out, [], removable)
    earlier = {out / name for name in left}
    return ([m for m in moved if m[0] in earlier], [m for m in moved if m[0] not in earlier])


KEPT = "kept"  # in a plan's folder: the files moved out of the runtimes' folders
RUNTIME_FOLDERS = ("msccl", "mscclpp")  # a runtime is pointed at one of their folders


def _aside_in(out: Path, name) -> Path | None:
    """Where a file of the plan's folder `out` is moved aside to: KEPT/ and its path
    there, for one in a runtime's folder, else None (beside it). BadInput where that
    folder could not be made inside `out`: a symbolic link or a file on the way."""
    rel = Path(name)
    if rel.parts[0] not in RUNTIME_FOLDERS:
        return None
    # a stand-in last name: only the folders on the way are checked (links, files)
    folder = inside_without_links(out, Path(KEPT) / rel.parent / "-").parent
    check_folder(folder, "a plan's kept/")
    return folder


PLAN_FOLDERS = ("schedules", "msccl", "mscclpp", "plots")  # what a plan writes, but its
PLAN_SUFFIXES = (".json", ".xml", ".png", ".py")          # report.md and plan.json


def _earlier_files(out: Path) -> list[str]:
    """The files an earlier plan in `out` wrote, as its plan.json lists them: only when
    synth wrote that plan.json ("format": "synth.plan"), and
    only names a plan writes (PLAN_FOLDERS, PLAN_SUFFIXES): a user's plan.json, or a
    listing edited to name their files, never removes anything else."""
    try:
        if not stat.S_ISREG((out / "plan.json").stat().st_mode):
            return []  # a pipe would wait for a writer, a folder is no listing
        doc = json.loads((out / "plan.json").read_text())
        if not isinstance(doc, dict) or doc.get("format") != "synth.plan":
            return []
        listed = [f for f in doc["files"] if isinstance(f, str)]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return []
    return [f for f in listed if len(Path(f).parts) > 1
            and Path(f).parts[0] in PLAN_FOLDERS and f.endswith(PLAN_SUFFIXES)]


def _stale(out: Path, listed: list[str], keep: set[str], ours: Manifest | None
           ) -> tuple[list[Path], list[str]]:
    """The `listed` files this plan does not write (a runtime loads every file of its
    folder: a stale one would shadow ranges), as (those to remove: plain files inside
    `out`, reached without a symbolic link, and synth's as it wrote them by the manifest
    `ours`; the names of the others there: changed since, or not known to be synth's)."""
    root, kept, removable = out.resolve(), [], []
    for name in listed:
        rel = Path(name)
        if name in keep or rel.is_absolute() or ".." in rel.parts:
            continue
        path = out / rel
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if real != root / rel or not real.is_file():  # a link somewhere on the way
            continue
        if users_file(out, path, ours):
            kept.append(name)
        else:
            removable.append(real)
    return removable, kept


def _register(plan: Plan, entries: list[dict]) -> str:
    """register.py: the plans per communicator, registered for one communicator at a
    time with the process's own rank in it (synth.run.mscclpp_shim)."""
    rows: dict[str, list[str]] = {}
    for r in entries:
        e = next(x for x in plan.entries if (x.communicator, x.collective, x.root)
                 == (r["communicator"], r["collective"], r["root"]))
        per_box = ranks_per_node(e)
        for f in r["files"]:
            if f["file"]:
                rows.setdefault(e.communicator, []).append(
                    f"        ({str(Path(f['file']).relative_to('mscclpp'))!r}, "
                    f"{e.ranks}, {per_box}),")
    table = [line for name, lines in rows.items()
             for line in (f"    {name!r}: [", *lines, "    ],")]
    return "\n".join([
        '"""Register this plan\'s MSCCL++ execution plans with the NCCL shim (MSCCL++',
        "v0.9 and later; synth.run.mscclpp_shim, docs/runtimes.md \"PyTorch\"): once per",
        "communicator the process belongs to, with its own rank in that communicator,",
        "before NCCL creates the communicator (before its first collective):",
        "",
        "    LD_PRELOAD=.../libmscclpp_nccl.so torchrun ... train.py   # with, in train.py:",
        "    import register",
        "    register.register(\"dp\", dist.get_rank(dp_group))   # each communicator",
        "",
        "Each plan carries its own message-size range; synth's selector gives a call to a",
        "plan of its communicator whose rank, size range and chunking fit it, when the",
        "call's buffers are ones recorded for plans (synth.run.mscclpp_shim.stage_buffer:",
        "synth.run.pytorch.SynthComm's), and every other call to the shim's own",
        'algorithms."""',
        "",
        "from pathlib import Path",
        "",
        "HERE = Path(__file__).resolve().parent",
        "PLANS = {  # communicator: [(file, world size, ranks per node)]",
        *table,
        "}",
        "",
        "",
        "def register(communicator, rank):",
        "    from synth.run.mscclpp_shim import register as register_plans",
        "",
        "    files = PLANS[communicator]",
        "    world, per_node = files[0][1], files[0][2]",
        "    return register_plans([HERE / f for f, _, _ in files], rank, world, per_node,",
        "                          tag=communicator)",
        ""])


