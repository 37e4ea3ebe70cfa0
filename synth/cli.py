"""The command line (DESIGN.md, "The command line").

Every error reaches the user as one line on stderr and an exit code: 0 done, 1 the
answer is no, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import json
import sys

import click

from synth.errors import BadInput, NoAnswer, SynthError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="synth", prog_name="synth")
def cli():
    """Synthesize collective communication algorithms for GPU clusters."""


# --- topologies -------------------------------------------------------------------

@cli.group()
def topo():
    """List, show and draw topologies."""


@topo.command("list")
def topo_list():
    """Built-in topologies, generators and the multi-node form."""
    from synth.catalog import GENERATORS, builtin_names, resolve

    click.echo("built-in:")
    for name in builtin_names():
        t = resolve(name)
        click.echo(f"  {name:<10} {t.ranks:>3} GPUs  {t.description}")
    click.echo("generators:")
    for text in GENERATORS.values():
        spec, _, what = text.partition("  ")
        click.echo(f"  {spec:<24} {what}")
    click.echo("multi-node:\n  NAMExK                   K boxes of NAME joined by their NICs "
               "(dgx2x4, dgxh100x8, ...)")
    click.echo("files:\n  PATH.yaml | PATH.json      a topology file (format: README.md)")


@topo.command("show")
@click.argument("spec", metavar="TOPO")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def topo_show(spec, as_json):
    """GPUs, switches, NICs, links, groups, per-GPU bandwidth, hop diameter."""
    from synth.catalog import resolve
    from synth.topology_report import format_summary, topology_summary

    summary = topology_summary(resolve(spec))
    click.echo(json.dumps(summary, indent=1) if as_json else format_summary(summary))


# --- synthesis ----------------------------------------------------------------------

SOLVER_CHOICE = {
    "auto": ("cpsat", "auto: CP-SAT solved every instance in bench/ faster than Z3"),
    "cpsat": ("cpsat", "asked for"),
    "z3": ("z3", "asked for"),
}


def _synthesis_command(name: str):
    @click.option("--topo", "spec", required=True, help="Topology name, generator or file.")
    @click.option("--root", type=int, default=None, help="Root rank (rooted collectives).")
    @click.option("--steps", type=click.IntRange(1, 64), default=None,
                  help="With --rounds and --chunks: solve that one instance. Alone: only "
                       "schedules with exactly this many steps.")
    @click.option("--rounds", type=click.IntRange(1, 4096), default=None)
    @click.option("--chunks", type=click.IntRange(1, 256), default=None)
    @click.option("--max-steps", type=click.IntRange(1, 64), default=None,
                  help="Largest step count searched [hop bound + 3; allreduce 2x + 2].")
    @click.option("--max-chunks", type=click.IntRange(1, 256), default=None,
                  help="Largest chunks per share searched [8].")
    @click.option("--solver", type=click.Choice(list(SOLVER_CHOICE)), default="auto",
                  show_default=True)
    @click.option("--time-limit", type=click.FloatRange(min=0.1), default=300.0,
                  show_default=True, help="Seconds for the whole search.")
    @click.option("--method", type=click.Choice(["auto", "exact", "decomposed"]),
                  default="auto", show_default=True,
                  help="auto: on multi-node topologies, decompose into boxes and the network "
                       "first, then search exactly in the time left.")
    @click.option("--hints", "hints_path", default=None, type=click.Path(dir_okay=False),
                  help="Optional YAML hints for the decomposition (README, Multi-node).")
    @click.option("--out", "out_dir", default="out", show_default=True,
                  help="Schedules go to OUT/TOPO/COLLECTIVE/.")
    @click.option("--format", "formats", default="json", show_default=True,
                  help="Comma-separated output formats.")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON summary.")
    @click.option("--progress/--no-progress", default=None,
                  help="Report each solver call on stderr [on a terminal].")
    @click.option("--plots", is_flag=True,
                  help="Also plot the frontier and time against size (PNG) beside the files.")
    def command(spec, root, steps, rounds, chunks, max_steps, max_chunks, solver, time_limit,
                method, hints_path, out_dir, formats, as_json, progress, plots):
        from synth.catalog import resolve
        from synth.hints import read_hints
        from synth.output import parse_formats

        formats = parse_formats(formats)
        topo = resolve(spec)
        hints = read_hints(hints_path, topo.ranks) if hints_path else None
        backend, why = SOLVER_CHOICE[solver]
        if rounds is not None or chunks is not None:
            if None in (steps, rounds, chunks):
                raise BadInput("give --steps, --rounds and --chunks together (one instance), "
                               "or --steps alone")
            return _one_instance(topo, name, root, steps, rounds, chunks, backend,
                                 time_limit, out_dir, formats, as_json)
        if progress is None:
            progress = sys.stderr.isatty() and not as_json
        return _frontier(topo, name, root, steps, max_steps, max_chunks, backend, why,
                         time_limit, out_dir, formats, as_json, progress, plots, method, hints)

    command.__doc__ = (f"Synthesize {name} schedules: the Pareto frontier of steps against "
                       "rounds per chunk, each verified and written under --out.")
    return cli.command(name)(command)


def _one_instance(topo, name, root, steps, rounds, chunks, backend, time_limit, out_dir,
                  formats, as_json):
    from synth.collectives import make_collective
    from synth.linkmodel import lower
    from synth.output import output_dir, write_points
    from synth.pareto import Point
    from synth.synthesis import solve_instance

    model = lower(topo)
    coll = make_collective(name, model.ranks, chunks, root)
    out = solve_instance(model, coll, steps, rounds, backend, time_limit)
    what = f"{name} on {topo.name} with {steps} steps, {rounds} rounds, {chunks} chunks"
    if out.status == "unsat":
        raise NoAnswer(f"no schedule: {what} is infeasible ({out.seconds:.2f} s)")
    if out.status != "sat":
        raise NoAnswer(f"no answer: {what} was not decided within {time_limit:g} s")
    point = Point(out.schedule, proven=False)
    path, = write_points([point], output_dir(out_dir, topo.name, name), formats)
    found = out.schedule
    line = {"collective": name, "topology": topo.name, "steps": found.num_steps,
            "rounds": found.rounds, "chunks": chunks, "file": str(path),
            "solve_seconds": round(out.seconds, 3), "solver": backend}
    click.echo(json.dumps(line) if as_json else
               f"found {name} on {topo.name}: {found.num_steps} steps, {found.rounds} rounds, "
               f"{chunks} chunks in {out.seconds:.2f} s -> {path}")
    return 0


def _frontier(topo, name, root, steps, max_steps, max_chunks, backend, why, time_limit,
              out_dir, formats, as_json, show_progress, plots=False, method="auto", hints=None):
    from dataclasses import replace

    from synth.frontier import synthesize
    from synth.output import format_table, output_dir, result_summary, write_points
    from synth.pareto import Limits

    limits = Limits(max_steps, max_chunks or 8, time_limit, backend)
    if steps is not None:
        limits = replace(limits, max_steps=steps, min_steps=steps)
    progress = _Progress(show_progress, overwrite=sys.stderr.isatty())
    progress.say(f"solver: {backend} ({why})")
    result = synthesize(topo, name, root, limits, progress.event, method, hints)
    progress.done()
    if steps is not None:
        result.points = [p for p in result.points if p.steps == steps]
    paths = write_points(result.points, output_dir(out_dir, topo.name, name), formats)
    if plots and result.points:
        from synth.baselines import baselines
        from synth.plots import write_plots

        write_plots(result, [(base.name, base.schedule) for base in
                             baselines(result.model, name, result.root)],
                    output_dir(out_dir, topo.name, name))
    summary = result_summary(result, topo.name, backend, paths, why)
    click.echo(json.dumps(summary, indent=1) if as_json else format_table(summary))
    if not result.points:
        why = "; ".join(dict.fromkeys(s.stopped.split(":")[0]
                                      for s in result.searches.values()))
        raise NoAnswer(f"no schedule found for {name} on {topo.name} ({why})")
    if any(s.stopped == "interrupted" for s in result.searches.values()):
        return 130
    return 0


class _Progress:
    """Solver calls and points on stderr: one overwritten line on a terminal, plain
    lines elsewhere."""

    def __init__(self, enabled: bool, overwrite: bool):
        self.enabled, self.overwrite = enabled, overwrite

    def say(self, text: str) -> None:
        if not self.enabled or (not text and not self.overwrite):
            return
        if self.overwrite:
            click.echo(f"\r\033[K{text}", err=True, nl=False)
        else:
            click.echo(text, err=True)

    def event(self, kind: str, data) -> None:
        if kind == "search":
            self.say(f"searching {data} ...")
        elif kind == "ask":
            self.say(f"  trying S={data[0]} R={data[1]} C={data[2]} ...")
        elif kind == "point":
            self.say("")
            if self.enabled:
                click.echo(f"  found S={data.steps} R={data.rounds} C={data.chunks}", err=True)

    def done(self) -> None:
        self.say("")


for _name in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
              "scatter", "alltoall"):
    _synthesis_command(_name)


# --- bounds -----------------------------------------------------------------------

@cli.command("bounds")
@click.argument("collective", metavar="COLLECTIVE")
@click.option("--topo", "spec", required=True, help="Topology name, generator or file.")
@click.option("--root", type=int, default=None, help="Root rank of rooted collectives.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bounds_command(collective, spec, root, as_json):
    """Lower bounds on steps and bandwidth for COLLECTIVE on TOPO."""
    from synth.bounds import collective_bounds
    from synth.catalog import resolve

    b = collective_bounds(resolve(spec), collective, root)
    summary = {"collective": b.collective, "topology": spec, "ranks": b.ranks,
               "steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
               "latency_us": b.latency_us, "us_per_mb": b.us_per_mb,
               "algbw_gbps_max": 1 / (b.us_per_byte * 1e3), "note": b.note}
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"{collective} on {spec} ({b.ranks} ranks)")
    click.echo(f"  steps            >= {b.steps}  (latency >= {b.latency_us:.2f} us)")
    click.echo(f"  rounds per chunk >= {b.rounds_per_chunk}  ({b.us_per_mb:.3f} us/MB, "
               f"algbw <= {summary['algbw_gbps_max']:.1f} GB/s)")
    if b.note:
        click.echo(f"  note: {b.note}")


@cli.command("compare")
@click.argument("collective", metavar="COLLECTIVE")
@click.option("--topo", "spec", required=True, help="Topology name, generator or file.")
@click.option("--root", type=int, default=None, help="Root rank of rooted collectives.")
@click.option("--sizes", default="1KB,1MB,64MB,1GB", show_default=True,
              help="Message sizes (nccl-tests' n, binary units).")
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Seconds for synthesizing the frontier.")
@click.option("--solver", type=click.Choice(list(SOLVER_CHOICE)), default="auto",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def compare_command(collective, spec, root, sizes, time_limit, solver, as_json):
    """Synthesized frontier against ring, tree, recursive, direct and hierarchical."""
    from synth.baselines import baselines
    from synth.catalog import resolve
    from synth.compare import comparison, format_comparison, make_rows
    from synth.cost import parse_size
    from synth.frontier import synthesize
    from synth.pareto import Limits

    size_list = [parse_size(x) for x in sizes.split(",")]
    topo = resolve(spec)
    limits = Limits(time_limit=time_limit, backend=SOLVER_CHOICE[solver][0])
    result = synthesize(topo, collective, root, limits)
    rows = make_rows([p.schedule for p in result.points],
                     [(base.name, base.schedule) for base in
                      baselines(result.model, collective, result.root)])
    data = comparison(rows, result.bounds, size_list)
    data.update(collective=collective, topology=topo.name, complete=result.complete)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        title = f"{collective} on {topo.name} ({topo.ranks} ranks): predicted time and algbw"
        click.echo(format_comparison(title, data, size_list))


# --- schedules --------------------------------------------------------------------

@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--cost", "show_cost", is_flag=True, help="Also print each schedule's cost.")
@click.option("--sizes", default="1KB,1MB,64MB,1GB", show_default=True,
              help="Message sizes for --cost.")
def verify(files, show_cost, sizes):
    """Check schedule files with the independent simulator.

    Exit 0 when every file is valid, 1 when one is invalid, 2 when one is not a schedule.
    """
    from synth.cost import format_size, parse_size, schedule_cost
    from synth.schedule import schedule_from_dict
    from synth.verify import verify_file

    size_list = [parse_size(s) for s in sizes.split(",")] if show_cost else []
    worst = 0
    for path in files:
        try:
            doc = verify_file(path)
        except SynthError as e:
            where = "" if str(e).startswith(str(path)) else f"{path}: "
            click.echo(f"synth: {where}{e}", err=True)
            worst = max(worst, e.exit_code)
            continue
        line = (f"ok {path}: {doc['collective']} on {doc['topology'].get('name', '?')}, "
                f"{len(doc['steps'])} steps, "
                f"{sum(s['rounds'] for s in doc['steps'])} rounds, {doc['chunks']} chunks")
        if show_cost:
            cost = schedule_cost(schedule_from_dict(doc))
            times = "  ".join(f"{format_size(n)} {cost.time_us(n):.1f} us "
                              f"({cost.algbw_gbps(n):.1f} GB/s)" for n in size_list)
            line += f"\n   latency {cost.latency_us:.2f} us, {cost.us_per_byte * 1e6:.3f} us/MB;  {times}"
        click.echo(line)
    return worst


def main(argv=None) -> None:
    try:
        code = cli.main(args=argv, prog_name="synth", standalone_mode=False)
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        click.echo(f"synth: error: {e.format_message()}", err=True)
        code = 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("synth: interrupted", err=True)
        code = 130
    except SynthError as e:
        click.echo(f"synth: error: {e}", err=True)
        code = e.exit_code
    sys.exit(code if isinstance(code, int) else 0)


# Commands that live in modules of their own register themselves on import.
import synth.cli_run  # noqa: E402,F401  (registers run)
import synth.cli_draw  # noqa: E402,F401  (registers draw, topo draw, report)
import synth.cli_export  # noqa: E402,F401  (registers export)
