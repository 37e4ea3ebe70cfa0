"""`synth COLLECTIVE --steps S --rounds R --chunks C`: one instance of the exact search,
solved, verified and written (the frontier's command, synth.cli.synthesize, hands it
over)."""

from __future__ import annotations

import json

import click

from synth.cli.options import say_kept
from synth.errors import BadInput, NoAnswer


def one_instance_takes_no(names) -> None:
    """BadInput for an option a search takes and one instance would ignore (it wrote its
    file without a word of --max-chunks 2 beside --chunks 6, of --size or --plots)."""
    import click.core

    ctx = click.get_current_context()
    given = [p for p in ctx.command.params if p.name in names and ctx.get_parameter_source(
        p.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise BadInput(f"one instance (--steps, --rounds, --chunks) takes no "
                       f"{given[0].opts[0]}: it belongs to a search")


def one_instance(topo, name, root, steps, rounds, chunks, backend, time_limit, out_dir,
                 formats, as_json, finish_share: float) -> int:
    """Solve (steps, rounds, chunks) of `name` on `topo`, write its files, say so; the
    solver leaves `finish_share` of the time limit for writing."""
    from synth.deadline import job_deadline
    from synth.export import EXTENSIONS
    from synth.output import counted, point_stem, rooted, write_points
    from synth.output_folder import output_dir, owner_text
    from synth.schedule.collectives import DUAL, make_collective
    from synth.search.encoding import variables_for
    from synth.search.instance import MAX_VARIABLES, TooLarge, solve_instance
    from synth.search.pareto import Point
    from synth.topology.linkmodel import TimeLimit, lower_with_routes, rank_links_at_most

    deadline = job_deadline(time_limit)
    directory = output_dir(out_dir, topo, name)  # a bad --out fails before the solver
    coll = make_collective(name, topo.ranks, chunks, root)  # its root, where it has one
    what = f"{rooted(name, coll.root)} on {topo.name} with {counted(steps, 'step')}, " \
        f"{counted(rounds, 'round')}, {counted(chunks, 'chunk')}"
    # too large by arithmetic, before the topology is even lowered (seconds at scale)
    size = variables_for(DUAL.get(name, name), topo.ranks, chunks, rank_links_at_most(topo),
                         steps)
    if size > MAX_VARIABLES:
        raise NoAnswer(f"no answer: {what} is too large for exact synthesis (about "
                       f"{size:,} variables at most; limit {MAX_VARIABLES:,})")
    try:
        model = lower_with_routes(topo, deadline).model
    except TimeLimit as e:
        raise NoAnswer(f"no answer: the time limit ran out while {e}") from None
    try:
        out = solve_instance(model, coll, steps, rounds, backend,
                             deadline.reserving(finish_share * time_limit).solver_seconds())
    except TooLarge as e:
        raise NoAnswer(f"no answer: {what} is too large for exact synthesis ({e})") from None
    if out.status == "unsat":
        raise NoAnswer(f"no schedule: {what} is infeasible ({out.seconds:.2f} s)")
    if out.status != "sat":
        raise NoAnswer(f"no answer: {what} was not decided within {time_limit:g} s")
    point = Point(out.schedule, proven=False)
    kept = []
    write_points([point], directory, formats, owner=owner_text(topo), kept=kept)
    say_kept(kept)
    # every format's file (the path above is the first's: two formats named one file)
    files = [str(directory / f"{point_stem(point)}{EXTENSIONS[f]}") for f in formats]
    found = out.schedule
    line = {"collective": name, "root": coll.root, "topology": topo.name,
            "steps": found.num_steps, "rounds": found.rounds, "chunks": chunks,
            "file": files[0], "files": files, "solve_seconds": round(out.seconds, 3),
            "solver": backend, "cached": out.cached}
    how = "answered from the cache" if out.cached else f"in {out.seconds:.2f} s"
    click.echo(json.dumps(line) if as_json else
               f"found {rooted(name, coll.root)} on {topo.name}: "
               f"{counted(found.num_steps, 'step')}, {counted(found.rounds, 'round')}, "
               f"{counted(chunks, 'chunk')} {how} -> {', '.join(files)}")
    return 0
