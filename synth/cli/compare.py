"""`synth bounds` and `synth compare`: how good a schedule can be, and how the frontier
fares against the baselines."""

from __future__ import annotations

import json

import click

from synth.cli.app import cli
from synth.cli.options import (BOXES, DEGRADED, MODEL, ROOT, SEARCH, SIZES, SOLVER_CHOICE,
                               TIME_LIMIT, TOPO, examples, json_option, resolve_in_time)


@cli.command("bounds", short_help="Lower bounds on steps and bandwidth.", epilog=examples(
    "synth bounds allreduce --topo dgx1", "synth bounds broadcast --topo dgx2x2 --root 3 --json"))
@click.argument("collective", metavar="COLLECTIVE")
@TOPO
@BOXES
@DEGRADED
@ROOT
@TIME_LIMIT
@json_option()
def bounds_command(collective, spec, boxes, without, degrade, routes, root, time_limit, as_json):
    """Lower bounds on steps and bandwidth for COLLECTIVE on TOPO. Past --time-limit,
    the best bound found so far (a valid, maybe looser bound, marked partial)."""
    from synth.bounds import collective_bounds
    from synth.deadline import job_deadline
    from synth.errors import NoAnswer
    from synth.output import degraded_line, degraded_summary, rooted
    from synth.topology.several_routes import routes_lines, routes_summary
    from synth.schedule.collectives import make_collective
    from synth.topology.linkmodel import TimeLimit, lower_with_routes

    deadline = job_deadline(time_limit)
    topo = resolve_in_time(spec, boxes, without + degrade, time_limit, routes)
    try:
        lowering = lower_with_routes(topo, deadline)
    except TimeLimit as e:
        raise NoAnswer(f"no bound: the time limit ({time_limit:g} s) ran out while {e}"
                       ) from None
    b = collective_bounds(lowering, collective, root, deadline)
    root = make_collective(collective, b.ranks, 1, root).root  # the default's, 0, named
    summary = {"collective": b.collective, "topology": topo.name, "ranks": b.ranks,
               "root": root, "steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
               "latency_us": b.latency_us, "us_per_mb": b.us_per_mb,
               "algbw_gbps_max": 1 / (b.us_per_byte * 1e3), "note": b.note,
               "partial": b.partial}
    summary |= routes_summary(topo, lowering.model)
    if b.without_in_network is not None:  # the switches reduce: the bound without them too
        summary["without_in_network"] = str(b.without_in_network)
    degraded = degraded_summary(topo, collective, root, b, deadline)
    if degraded is not None:
        summary["degraded"] = degraded
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"{rooted(collective, root)} on {topo.name} ({b.ranks} ranks)")
    click.echo(f"  steps            >= {b.steps}  (latency >= {b.latency_us:.2f} us)")
    click.echo(f"  rounds per chunk >= {b.rounds_per_chunk}  ({b.us_per_mb:.3f} us/MB, "
               f"algbw <= {summary['algbw_gbps_max']:.1f} GB/s)"
               + ("  with in-network reduction" if b.without_in_network is not None else ""))
    if b.without_in_network is not None:
        plain = b.without_in_network / b.rounds_per_chunk
        click.echo(f"  rounds per chunk >= {b.without_in_network}  without it (the switches "
                   f"buy up to {float(plain):.2f} x)")
    if b.note:
        click.echo(f"  note: {b.note}")
    if degraded is not None:
        click.echo(f"  {degraded_line(degraded)}")
    for line in routes_lines(summary):
        click.echo(f"  {line}")


@cli.command("compare", short_help="The frontier against the baselines and NCCL, per size.",
             epilog=examples("synth compare allreduce --topo dgx1",
                             "synth compare allgather --topo dgxh100x2 --sizes 1MB,64MB --json"))
@click.argument("collective", metavar="COLLECTIVE")
@TOPO
@BOXES
@DEGRADED
@ROOT
@SIZES
@SEARCH
@TIME_LIMIT
@json_option()
@MODEL
def compare_command(collective, spec, boxes, without, degrade, routes, root, sizes, max_steps,
                    max_chunks, method, solver, time_limit, as_json, cost_model):
    """Synthesized frontier against ring, tree, recursive, direct and hierarchical, and
    (cost model 2) NCCL as it runs there: its choice per size and why."""
    from synth.compare import comparison, format_comparison, make_rows, nccl_choices
    from synth.deadline import job_deadline
    from synth.output import degraded_line, degraded_summary, rooted
    from synth.topology.several_routes import routes_lines, routes_summary
    from synth.cli.synthesize import (baselines_by, frontier_within, nothing_found,
                                       under_the_bound)
    from synth.predict.nccl import as_it_runs
    from synth.predict.timing import prices
    from synth.search.pareto import Limits

    topo = resolve_in_time(spec, boxes, without + degrade, time_limit, routes)
    limits = Limits(max_steps, max_chunks, time_limit, SOLVER_CHOICE[solver][0])
    # the baselines, their times and NCCL's choices follow: a tenth of the limit
    result = frontier_within(topo, collective, root, limits, cost_model, time_limit,
                             0.7, 0.9, method)
    if not result.points and not result.interrupted:  # nothing of synth's to compare
        under_the_bound(result, topo.name, None, max_steps)
        raise nothing_found(result, collective, topo.name)
    calibrated = cost_model == "calibrated"
    deadline = job_deadline(time_limit)
    # the baselines by 95% of the limit: timing the rows, NCCL's choices and the degraded
    # machine's bound come after them (at the limit itself, compare ended 7% past it)
    built, _, unbuilt = baselines_by(result, collective, deadline.reserving(0.05 * time_limit))
    rows = make_rows([p.schedule for p in result.points],
                     [(base.name, base.schedule) for base in built],
                     prices(topo) if calibrated else None)
    if not rows:  # interrupted before any point or baseline
        raise nothing_found(result, collective, topo.name)
    nccl = nccl_choices(topo, collective, sizes) if calibrated else None
    data = comparison(rows, result.bounds, sizes, nccl, as_it_runs(topo.figures))
    data.update(collective=collective, root=result.root, topology=topo.name,
                **routes_summary(topo, result.model),
                complete=result.complete and not unbuilt, interrupted=result.interrupted)
    degraded = degraded_summary(topo, collective, result.root, result.bounds, deadline)
    if degraded is not None:
        data["degraded"] = degraded
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        title = (f"{rooted(collective, result.root)} on {topo.name} ({topo.ranks} ranks): "
                 "predicted time and algbw")
        click.echo(format_comparison(title, data, sizes))
        if degraded is not None:
            click.echo(degraded_line(degraded))
        for line in routes_lines(data):
            click.echo(line)
    if result.interrupted:
        click.echo("synth: interrupted (the comparison has the points found until then)",
                   err=True)
        return 130
