"""Work on a built schedule, sized before it is done, so that a deadline holds.

Verifying a schedule, timing it in the cost model and writing its file each take time
in proportion to its size: the sends and switch operations of its program (each
operation's ranks counted) and its expanded steps (a pipeline's rounds per step). A
Pace per kind of work, measured on this machine as the job runs, turns a size into
seconds; a stage asks its Deadline whether the time left affords them before it
starts, and skips the work (OutOfTime) when it does not, rather than overrun.
"""

from __future__ import annotations

from fractions import Fraction

from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.cost import schedule_cost
from synth.schedule.file import schedule_text, topology_kept, verified
from synth.schedule.ir import Schedule

# seconds per unit of size: verifying (size), timing in cost model 2 (timing_size), and
# writing a file (json: size; a runtime's file, its text made and simulated: export_size,
# its batch program, which the file holds once however many batches a pipeline has).
# The priors are an idle core's pace (verifying and writing tree and decomposed
# schedules: 6-9 us a unit; timing: about 1 us a unit on those, up to 11 us on
# in-network pipelines of few batches, so the dearer; a runtime's file: 0.9-1.1e-4 s a
# unit for dgx2x4's decomposed allreduce, 0.8 s each from 1 to 125 batches), scaled
# until measured by how much slower than their priors this command's other work ran
# (synth.deadline.Pace)
VERIFY = Pace(1e-5, least=1000)
TIMING = Pace(1e-5, least=10_000)
WRITE = {"json": Pace(1e-5, least=1000), "msccl-xml": Pace(1e-4, least=1000),
         "mscclpp": Pace(1e-4, least=1000)}
# asking an exporter whether its runtime loads a schedule (synth.export.loads), per unit
# of export_size: an idle core ran 3e-5 to 2e-4 (MSCCL XML 1e-4 to 1.4e-3 where it
# tries every channel count before it refuses, which pacing cannot foresee: each try
# checks the deadline)
EXPORT = {"msccl-xml": Pace(2e-4, least=1000), "mscclpp": Pace(1e-4, least=1000)}
# making a pipeline's batch program to look up an answer remembered for it (per unit of
# export_size): an idle core ran 5e-6 on dgxh100x64's decomposed points (2.5 s each)
BATCH = Pace(5e-6, least=10_000)
# making a schedule's runtime form (its batch program, verified, then every chunk and
# rank spelled out: synth.export.form), per unit of export_size: 1.2e-5 on an idle core
# for dgxh100x64's decomposed points (6 s each); not cut once started, so paced
FORM = Pace(1.2e-5, least=10_000)


def size(schedule: Schedule) -> int:
    """Units of work in the schedule as written: each send and each rank of a switch
    operation of its program, each expanded step, and, until its text is made and kept
    for every file on it (synth.schedule.file.schedule_text), each link and group
    member of the machine every file holds (at 1024 GPUs behind a spine a million rank
    links, most of a file: left out, a point's write was held a second where it took
    20, and the job's last points found no time to be written)."""
    kept = topology_kept(schedule.model, schedule.symmetry)
    return _program(schedule) + schedule.num_steps + (0 if kept else
                                                      machine_size(schedule.model))


def machine_size(model) -> int:
    """A model's links and group members: what a file holds and the verifier reads of
    the machine."""
    return len(model.links) + sum(len(g.links) for g in model.groups)


def timing_size(schedule: Schedule) -> int:
    """Units of work in timing the schedule in cost model 2: the program's loads once,
    and per expanded step the program steps active in it (synth.predict.timing keeps
    each set of active steps' bottleneck, so a pipeline's steady state is priced once;
    counted once per batch, dgx2x32's 125-batch pipeline looked 125 times dearer than
    it was, and a 300 s job timed 3 of its 11 points)."""
    return _program(schedule) + schedule.num_steps * min(len(schedule.steps),
                                                         schedule.batches)


def export_size(schedule: Schedule) -> int:
    """Units of work in asking an exporter for the schedule's program, or in making its
    runtime file: the runtimes' programs spell out every chunk of a range; a pipeline's
    is its batch program (MSCCL repeats it over slices of the buffer, MSCCL++ runs it
    once: synth.export.form), so its batches cost nothing more (counting them made a
    16-batch pipeline look 16 times dearer to ask about than it is, and dgxh100x2 at
    60 s asked 1 of 8 points; priced so, dgx2x4's 125-batch file looked 31 times dearer
    than its 0.9 s, and a 60 s job left 4 points' files unwritten at 27 s)."""
    chunks = sum(x.count for step in schedule.steps for x in step.sends) + sum(
        op.count * (len(op.srcs) + len(op.dsts))
        for step in schedule.steps for op in step.switch_ops)
    # a folded schedule's steps hold one orbit's sends; the exporters unfold every rank's
    # (ring:1024's greedy point: asked as 1 rank's, it took 15 s past a 5 s limit)
    order = schedule.symmetry.order if schedule.symmetry is not None else 1
    return chunks * order + len(schedule.steps)


def _program(schedule: Schedule) -> int:
    return sum(len(step.sends) + sum(len(op.srcs) + len(op.dsts) for op in step.switch_ops)
               for step in schedule.steps)


def writing(schedule: Schedule) -> float:
    """Seconds to write the schedule's file (json) at the pace measured so far: the
    work a job holds for each point it finds (Deadline.hold), so that it can keep it.
    (Timing it in cost model 2 gets what is left: a point left untimed is still kept.)"""
    return WRITE["json"].seconds(size(schedule))


def verified_within(schedule: Schedule, deadline: Deadline) -> Schedule:
    """The schedule, once the verifier accepts it (synth.schedule.file.verified), if
    that and writing it fit before the deadline at the paces measured so far (else
    OutOfTime: a point that could not be written is not worth verifying); the deadline
    then holds the work of writing it. Where only the guess at writing, unmeasured,
    stands in the way, writing is measured first (its text made and dropped): the
    guess ran 8 x the real pace on dgx2x32's alltoall, whose every point was dropped
    for it, at any time limit."""
    units = size(schedule)
    verify = VERIFY.seconds(units)
    if not deadline.affords(verify + writing(schedule)) and deadline.affords(verify):
        write = WRITE["json"]
        if not write.measured and units >= write.least:
            with write.timing(units):
                schedule_text(schedule)
    if not deadline.affords(verify + writing(schedule)):
        raise OutOfTime("verifying a schedule")
    with VERIFY.timing(units):
        verified(schedule)
    held(schedule, deadline)
    return schedule


def held(schedule: Schedule, deadline: Deadline) -> None:
    """The deadline holds the work of writing the schedule's file. Where that work, as
    guessed, is a share of the time left worth knowing (MEASURED_FROM), the first point
    large enough measures what writing takes on this machine (its text, made and
    dropped): other work's pace says little of it, and what a job holds for its points
    follows this one; the machine's text, made then or for the first point on it, is
    kept for every file on it, so the points hold their own sends alone. Below that
    share the guess is held as it is: making the text cost torus:8x8's allgather a third
    of its CPU time, for files of 0.1 s in a 300 s job."""
    units = size(schedule)
    write = WRITE["json"]
    if write.seconds(units) >= MEASURED_FROM * deadline.left():
        kept = topology_kept(schedule.model, schedule.symmetry)
        if not kept or (not write.measured and units >= write.least):
            with write.timing(units):
                schedule_text(schedule)
    deadline.hold(write, size(schedule), costs(schedule))


# a file whose writing is guessed under this share of the time left is not made to
# measure it: a guess off by the most seen (3 x, UNMEASURED's note) costs 3% of a limit
MEASURED_FROM = 0.01


def costs(schedule: Schedule) -> tuple:
    """What makes a point worth keeping (synth.pareto_front.pareto_filter's order): its
    latency and its rounds per chunk; one that another beats on both is not written."""
    return (round(schedule_cost(schedule).latency_us, 9),
            Fraction(schedule.rounds, schedule.collective.chunks))
