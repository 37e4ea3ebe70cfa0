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

from synth.errors import BadInput, InternalError, SynthError

FORMATS = ("json", "msccl-xml", "mscclpp")
EXTENSIONS = {"json": ".json", "msccl-xml": ".xml", "mscclpp": ".mscclpp.json"}
_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")


PROTOCOLS = ("Simple", "LL", "LL128")  # NCCL's, which MSCCL's runtime runs too
# what each runtime runs of synth's files: MSCCL any of them, synth's MSCCL++ plans Simple
RUNTIME_PROTOCOLS = {"msccl-xml": PROTOCOLS, "mscclpp": ("Simple",)}


def render(schedule, fmt: str, inplace: bool = False, name: str | None = None,
           min_bytes: int = 0, max_bytes: int | None = None, check: bool = True,
           protocol: str = "Simple") -> tuple[str, str]:
    """(file text, one-line summary) of schedule in format fmt, for the runtime to run
    with `protocol` (MSCCL XML: any of PROTOCOLS; the MSCCL++ plans synth writes are
    Simple-protocol plans)."""
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

    schedule, note, program = lowered(schedule, fmt, inplace)
    coll = schedule.collective
    if fmt == "msccl-xml":
        from synth.export.msccl import to_msccl_xml
        from synth.export.msccl_sim import check_msccl_xml

        text = to_msccl_xml(schedule, inplace, name, min_bytes, max_bytes or 0, protocol,
                            program)
        if not check:
            return text, f"{coll.name} {mode}"
        report = _checked(check_msccl_xml, text, coll.root, "MSCCL XML")
        fused = sum(report["step_types"].get(t, 0) for t in ("rcs", "rrs", "rrcs"))
        return text, (f"{coll.name} {mode}, {report['ranks']} gpus, {report['channels']} "
                      f"channel(s), {report['threadblocks']} threadblocks, at most "
                      f"{report['max_steps_per_threadblock']} steps per threadblock, "
                      f"{fused} fused steps; simulated: no deadlock, right result{note}")
    from synth.export.mscclpp import to_mscclpp_plan
    from synth.export.mscclpp_sim import check_mscclpp_plan
    from synth.export.relays import ranks_per_node

    per_node = ranks_per_node(schedule.model)  # lowered relayed what needs it
    plan = to_mscclpp_plan(schedule, inplace, name, min_bytes, max_bytes or None,  # 0: none
                           program)
    text = json.dumps(plan, indent=1) + "\n"
    if not check:
        return text, f"{coll.name} {mode}"
    report = _checked(check_mscclpp_plan, json.loads(text), coll.root, "MSCCL++ plan",
                      ranks_per_node=per_node)
    channels = ", ".join(f"{n} {kind}" for kind, n in report["channels"].items() if n)
    return text, (f"{coll.name} {mode}, Simple protocol, channels: {channels}; "
                  f"{report['ranks']} gpus, at most {report['max_threadblocks_per_rank']} "
                  f"thread block(s) each and {report['max_ops_per_threadblock']} ops per "
                  f"thread block; simulated over two launches: no deadlock, right "
                  f"result{note}")


def sizes_line(fmt: str, text: str) -> str:
    """The one line that says which sizes a rendered file runs and what runs the
    others (synth.export.units, docs/runtimes.md "Any message size"); "" for the
    schedule format, which runs any size under `synth run`."""
    if fmt == "json":
        return ""
    from synth.export.units import header_of

    return header_of(fmt, text).contract()


MAX_EXPANDED_SENDS = 200_000  # a pipeline no runtime loop can express, unrolled at most
# a schedule written once per orbit (version 4) is spelled out for the runtimes, whose
# files name every rank's sends: at most this many (the greedy matching's cap before
# it wrote version 4: what was exported then still is)
MAX_UNFOLDED_SENDS = 2_200_000


# what a format without switch channels says of a version 3 schedule
IN_NETWORK = ("the schedule has switch operations (multicast, switch_reduce: version 3), "
              "which MSCCL XML cannot express (an MSCCL++ plan can, where each switch "
              "reduction is followed by the multicast of its sum: --to mscclpp)")


def runtime_form(schedule, switch_ops: bool = False):
    """(a version 1 schedule to lower, a note for the summary). A pipeline becomes its
    batch program, a collective of its own on a P-th of the chunks (synth.schedule.
    transform.one_batch): the runtimes run an algorithm over successive slices of the
    buffer, which is the pipeline. Chunk ranges stay (the exporters move cnt chunks in
    one step). A pipeline whose batches do not split every share evenly is unrolled, up
    to MAX_EXPANDED_SENDS sends. Switch operations are refused unless the format has them
    (`switch_ops`). A schedule written once per orbit is first spelled out for every
    rank, up to MAX_UNFOLDED_SENDS sends (the runtimes' files have no orbits)."""
    from synth.schedule.file import verified
    from synth.schedule.transform import one_batch

    if schedule.in_network and not switch_ops:
        raise BadInput(IN_NETWORK)
    schedule = schedule.unfolded(MAX_UNFOLDED_SENDS, "a runtime's file")
    if schedule.pipeline is None:
        return schedule.expanded(), ""
    batch = one_batch(schedule)
    if batch is not None:
        p = schedule.pipeline.batches
        return verified(batch).expanded(), (f"; one batch of the {p}-batch pipeline, which "
                                            "the runtime repeats over slices of the buffer")
    sends = sum(x.count for s in schedule.steps for x in (*s.sends, *s.switch_ops)
                ) * schedule.batches
    if sends > MAX_EXPANDED_SENDS:
        raise BadInput(f"the pipeline's batches do not split the buffer evenly, and unrolled "
                       f"it would be {sends:,} sends (at most {MAX_EXPANDED_SENDS:,})")
    return schedule.expanded(), "; the pipeline unrolled"


def _checked(check, doc, root, what, **layout):
    try:
        return check(doc, root=root, **layout)
    except SynthError as e:  # an exporter bug: refuse to write the file, loudly
        raise InternalError(f"the {what} fails its simulator ({e})") from None
