"""Exporters: a verified Schedule as the files real runtimes load.

    text, summary = render(schedule, "msccl-xml")          # MSCCL XML algorithm
    text, summary = render(schedule, "mscclpp")            # MSCCL++ execution plan (JSON)
    text, summary = render(schedule, "json")               # the schedule file itself

synth/export/layout.py maps the chunk numbering (docs/schedule-file.md) onto input,
output and scratch buffers; synth/export/msccl.py and synth/export/mscclpp.py lower the
steps. Every XML and plan is run through its independent simulator
(synth/export/msccl_sim.py, synth/export/mscclpp_sim.py) before it is returned.
Exporters never solve; BadInput says why a schedule cannot be expressed.
"""

from __future__ import annotations

import json
import re

from synth.deadline import Deadline
from synth.errors import BadInput, InternalError, SynthError
from synth.schedule.file import json_text
# what a runtime's file can hold, and the form a schedule takes for it (form.py: the
# exporters and loads read it from there; callers from here)
from synth.export.form import (IN_NETWORK, MAX_EXPANDED_SENDS,  # noqa: F401
                               MAX_UNFOLDED_SENDS, PROTOCOLS, RUNTIME_PROTOCOLS,
                               runtime_form)

FORMATS = ("json", "msccl-xml", "mscclpp")
EXTENSIONS = {"json": ".json", "msccl-xml": ".xml", "mscclpp": ".mscclpp.json"}
_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")


def render(schedule, fmt: str, inplace: bool = False, name: str | None = None,
           min_bytes: int = 0, max_bytes: int | None = None, check: bool = True,
           protocol: str = "Simple", deadline: Deadline = Deadline(),
           once: bool = False) -> tuple[str, str]:
    """(file text, one-line summary) of schedule in format fmt, for the runtime to run
    with `protocol` (MSCCL XML: any of PROTOCOLS; the MSCCL++ plans synth writes are
    Simple-protocol plans). OutOfTime when `deadline` passes while the exporter builds
    its program (its simulation, seconds at most, is not cut short). `once`: nothing
    else is rendered in this process (`synth export`), so the exporter's program and
    runtime form are dropped once the text is made, before the simulator reads it
    (torus:16x16's tree point: 600 MB off the peak)."""
    if protocol not in PROTOCOLS:
        raise BadInput(f"unknown protocol {protocol!r} (expected {', '.join(PROTOCOLS)})")
    if fmt in RUNTIME_PROTOCOLS and protocol not in RUNTIME_PROTOCOLS[fmt]:
        raise BadInput(f"cannot export to MSCCL++ with {protocol}: synth writes "
                       "Simple-protocol plans")
    if fmt not in FORMATS:
        raise BadInput(f"unknown export format '{fmt}' (expected {', '.join(FORMATS)})")
    if name is not None and not _NAME.fullmatch(name):
        raise BadInput(f"name {name!r}: use letters, digits and _ . : + - only")
    if min_bytes < 0 or (max_bytes is not None and max_bytes < 0):
        raise BadInput("message sizes must not be negative")
    if max_bytes and min_bytes > max_bytes:
        raise BadInput(f"--min-bytes {min_bytes} is above --max-bytes {max_bytes}")
    coll = schedule.collective
    if fmt == "json":  # the same text synthesis writes
        from synth.schedule.file import schedule_json, schedule_to_dict

        return (schedule_json(schedule_to_dict(schedule)),
                f"{coll.name} schedule, {coll.ranks} ranks, {schedule.num_steps} steps")
    mode = "in place" if inplace else "out of place"
    if name is None:  # named after the schedule asked for, not its batch program
        from synth.export.msccl import default_name

        name = re.sub(r"[^A-Za-z0-9_.:+-]", "_", default_name(schedule, inplace))
    from synth.export.loads import lowered  # what loads asks too: the same refusals

    schedule, note, program = lowered(schedule, fmt, inplace, deadline)
    coll = schedule.collective
    if fmt == "msccl-xml":
        from synth.export.msccl import to_msccl_xml
        from synth.export.msccl_sim import check_msccl_xml, memory_needed

        text = to_msccl_xml(schedule, inplace, name, min_bytes, max_bytes or 0, protocol,
                            program)
        schedule = program = None  # with `once`, nothing else holds them
        _dropped(once)
        if not check:
            return text, f"{coll.name} {mode}"
        _room_for(memory_needed(len(text), text.count("<tb "), text.count('hasdep="1"')),
                  "MSCCL XML")
        report = _checked(check_msccl_xml, text, coll.root, "MSCCL XML")
        fused = sum(report["step_types"].get(t, 0) for t in ("rcs", "rrs", "rrcs"))
        return text, (f"{coll.name} {mode}, {report['ranks']} gpus, {report['channels']} "
                      f"channel(s), {report['threadblocks']} threadblocks, at most "
                      f"{report['max_steps_per_threadblock']} steps per threadblock, "
                      f"{fused} fused steps; simulated: no deadlock, right result{note}")
    from synth.export.mscclpp import to_mscclpp_plan
    from synth.export.mscclpp_sim import check_mscclpp_plan, memory_needed
    from synth.export.relays import ranks_per_node

    per_node = ranks_per_node(schedule.model)  # lowered relayed what needs it
    plan = to_mscclpp_plan(schedule, inplace, name, min_bytes, max_bytes or None,  # 0: none
                           program)
    # short values on one line: torus:16x16's tree point wrote 118 MB in 7.7 s with
    # json's indent=1 (a line per number), 76 MB in 5.9 s so
    text = json_text(plan)
    blocks = [len(tb["ops"]) for gpu in plan["gpus"] for tb in gpu["threadblocks"]]
    schedule = program = plan = None  # with `once`, nothing else holds them
    _dropped(once)
    if not check:
        return text, f"{coll.name} {mode}"
    _room_for(memory_needed(len(text), len(blocks), max(blocks)), "MSCCL++ plan")
    report = _checked(check_mscclpp_plan, json.loads(text), coll.root, "MSCCL++ plan",
                      ranks_per_node=per_node)
    channels = ", ".join(f"{n} {kind}" for kind, n in report["channels"].items() if n)
    return text, (f"{coll.name} {mode}, Simple protocol, channels: {channels}; "
                  f"{report['ranks']} gpus, at most {report['max_threadblocks_per_rank']} "
                  f"thread block(s) each and {report['max_ops_per_threadblock']} ops per "
                  f"thread block; simulated over two launches: no deadlock, right "
                  f"result{note}")


def _room_for(need: int, what: str) -> None:
    """BadInput when checking the file would take more memory than this machine has
    free (synth.memory): one line, not the kernel's out-of-memory kill."""
    from synth.memory import available_bytes

    free = available_bytes()
    if free is not None and need > free:
        raise BadInput(f"not exported: simulating the {what} before writing it would take "
                       f"about {need / 2**30:.1f} GiB of memory, and this machine has "
                       f"{free / 2**30:.1f} GiB free")


def _dropped(once: bool) -> None:
    """Forget the programs and forms kept for later renders, where there are none."""
    if once:
        from synth.export.loads import forget

        forget()


def _checked(check, doc, root, what, **layout):
    try:
        return check(doc, root=root, **layout)
    except SynthError as e:  # an exporter bug: refuse to write the file, loudly
        raise InternalError(f"the {what} fails its simulator ({e})") from None
