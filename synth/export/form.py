"""The form a schedule takes for a runtime's file: the protocols each runtime runs, and
`runtime_form`, the version 1 schedule an exporter lowers (a pipeline's batch program,
a version 4 file spelled out for every rank, switch operations only where the format
has them). The exporters (msccl.py, mscclpp.py) and loads.py read it from here; the
package (synth.export) offers it to callers.
"""

from __future__ import annotations

from synth.errors import BadInput

PROTOCOLS = ("Simple", "LL", "LL128")  # NCCL's, which MSCCL's runtime runs too
# what each runtime runs of synth's files: MSCCL any of them, synth's MSCCL++ plans Simple
RUNTIME_PROTOCOLS = {"msccl-xml": PROTOCOLS, "mscclpp": ("Simple",)}


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
        return verified(batch).expanded(), (
            f"; one batch of the {p}-batch pipeline (MSCCL's loop repeats it over slices "
            "of the buffer; the MSCCL++ executor runs it once, over the whole buffer)")
    sends = sum(x.count for s in schedule.steps for x in (*s.sends, *s.switch_ops)
                ) * schedule.batches
    if sends > MAX_EXPANDED_SENDS:
        raise BadInput(f"the pipeline's batches do not split the buffer evenly, and unrolled "
                       f"it would be {sends:,} sends (at most {MAX_EXPANDED_SENDS:,})")
    return schedule.expanded(), "; the pipeline unrolled"
