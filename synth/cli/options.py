"""The command line's grammar (docs/cli.md, "Grammar"): the options commands share,
each defined here once with one name, one metavar, one default and one help text, so
that `synth allreduce`, `compare`, `report` and `plan` cannot drift apart again.

- every file or folder a command writes is `-o, --out` (out_option);
- every byte count takes units, as `--sizes` always did (Size, Sizes);
- one default time limit (synth.deadline.DEFAULT_TIME_LIMIT) for every command;
- a spelling that changed keeps working for one release (Renamed): hidden from --help,
  each use prints one line on stderr naming the new spelling.
"""

from __future__ import annotations

import math
import os

import click

from synth.deadline import DEFAULT_TIME_LIMIT

DEFAULT_SIZES = "1KB,1MB,64MB,1GB"


def resolve_in_time(spec, boxes, edits, time_limit: float, routes: str | None = None):
    """The machine TOPO (with --boxes, --without, --degrade, --routes) names, built within the
    command's --time-limit: fc:1049's million links take seconds to build and edit.
    NoAnswer, one line, when the limit runs out first."""
    from synth.deadline import job_deadline
    from synth.errors import NoAnswer
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import TimeLimit

    try:
        return resolve(spec, boxes, edits, job_deadline(time_limit), routes)
    except TimeLimit as e:
        raise NoAnswer(f"the time limit ({time_limit:g} s) ran out while {e}") from None

SOLVER_CHOICE = {
    "auto": ("cpsat", "auto: CP-SAT, faster than Z3 on most instances in bench/"),
    "cpsat": ("cpsat", "asked for"),
    "z3": ("z3", "asked for"),
}


class Seconds(click.ParamType):
    """A time limit: a finite number of seconds from 0.1 to a million."""

    name = "SECONDS"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{str(value)[:40]!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 0.1 <= seconds <= 1e6:
            self.fail(f"{str(value)[:40]!r} is not between 0.1 and 1000000 seconds", param,
                      ctx)
        return seconds


class Size(click.ParamType):
    """A byte count: a number with an optional binary unit (`64MB`, `67108867`), as
    nccl-tests' sizes are (synth.schedule.cost.parse_size). `bound`: a limit on sizes,
    where 0 is allowed and the command checks the upper end itself."""

    name = "SIZE"

    def __init__(self, bound: bool = False):
        self.bound = bound

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from synth.errors import BadInput
        from synth.schedule.cost import parse_size  # not at start-up: --help stays quick

        try:
            return parse_size(str(value), self.bound)
        except BadInput as e:
            self.fail(str(e), param, ctx)


class Sizes(click.ParamType):
    """A comma-separated list of sizes, each as Size takes it."""

    name = "SIZE[,SIZE...]"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        sizes = [Size().convert(part, param, ctx) for part in str(value).split(",")]
        return list(dict.fromkeys(sizes))  # each once: 1KB,1KB printed its column twice


class Renamed(click.Option):
    """An option whose earlier spellings (`old`) still parse, for one release: they are
    not in --help, and each use prints one line on stderr naming the new spelling."""

    def __init__(self, *decls, old: tuple[str, ...] = (), **attrs):
        super().__init__(*decls, **attrs)
        assert not self.is_flag, "only options that take a value are renamed"
        self.old = tuple(old)

    def _dest(self, spelling: str) -> str:
        return f"{self.name} as {spelling}"

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        for spelling in self.old:  # its own destination: consume_value tells them apart
            parser.add_option(obj=self, opts=[spelling], dest=self._dest(spelling),
                              action="store", nargs=self.nargs)

    def consume_value(self, ctx, opts):
        for spelling in self.old:
            if self._dest(spelling) not in opts:
                continue
            if self.name in opts and _same(opts[self.name]) != _same(opts[self._dest(spelling)]):
                # the new spelling won, and the old one's file was never written, unsaid
                raise click.BadParameter(f"given twice: {spelling} and "
                                         f"{'/'.join(self.opts)} name different values")
            if not ctx.resilient_parsing:
                deprecated(spelling, "/".join(self.opts))
            opts = {**opts, self.name: opts[self._dest(spelling)]}
        return super().consume_value(ctx, opts)


def _same(value):
    """A value as compared between spellings: a path as the file it names (box.yaml and
    ./box.yaml are one)."""
    return os.path.normpath(value) if isinstance(value, str) else value


def deprecated(old: str, new: str) -> None:
    click.echo(f"synth: note: {old} is deprecated and goes in the next release; use {new}",
               err=True)


def out_option(dest: str, metavar: str, help: str, *, default: str | None = None,
               required: bool = False, old: tuple[str, ...] = ("--output",)):
    """`-o, --out`: where a command writes (a folder or a file, as `metavar` says)."""
    # click 8.3+ counts an explicit default=None as a value: required would never fire
    given = {} if default is None else {"default": default, "show_default": True}
    return click.option("-o", "--out", dest, cls=Renamed, old=old, metavar=metavar,
                        required=required, help=help, **given)


def examples(*lines: str) -> str:
    """An --help epilog of example command lines, printed as written (click's \\b)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def apply(*options):
    """One decorator of several options, in the order --help lists them."""
    def decorate(f):
        for option in reversed(options):
            f = option(f)
        return f
    return decorate


TOPO = click.option(
    "--topo", "spec", required=True, metavar="TOPO",
    help="Topology: a built-in, a generator, NAMExK or a file (synth topo list).")

BOXES = click.option(
    "--boxes", type=int, default=None, metavar="K",
    help="K copies of the topology's one box, joined by its network: section (what "
         "NAMExK does for a built-in, for a file of your own).")

class Edits(click.ParamType):
    """`--without` or `--degrade`: comma-separated edits of the machine
    (synth.topology.degrade), each checked here as far as it can be before the topology
    is read; the topology's own names are checked once it is."""

    def __init__(self, narrowing: bool):
        self.narrowing = narrowing
        self.name = "LINK=F[,LINK=F...]" if narrowing else "PART[,PART...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from synth.errors import BadInput
        from synth.topology.degrade import parse_edit  # not at start-up

        texts = []
        for part in str(value).split(","):
            try:
                edit = parse_edit(part)
            except BadInput as e:
                self.fail(str(e), param, ctx)
            if self.narrowing and edit.fraction is None:
                self.fail(f"{part.strip()[:40]!r}: expected LINK=F, the link at F of its "
                          "bandwidth (gpu0-nic0=0.5)", param, ctx)
            if not self.narrowing and edit.fraction is not None:
                self.fail(f"{part.strip()[:40]!r} narrows a link: use --degrade "
                          f"{part.strip()[:40]}", param, ctx)
            texts.append(edit.text)
        return tuple(texts)


def _flat(ctx, param, value) -> tuple[str, ...]:
    return tuple(text for texts in value for text in texts)


WITHOUT = click.option(
    "--without", type=Edits(False), multiple=True, callback=_flat,
    help="Take parts of the machine away: a NIC or switch (nic2), a link (gpu3-nvswitch) "
         "or N of its lanes (gpu3-nvswitch:1); in a cluster, box1.nic2 is box 1's only, "
         "nic2 every box's. Repeatable (docs/cli.md, \"Degraded machines\").")

DEGRADE = click.option(
    "--degrade", type=Edits(True), multiple=True, callback=_flat,
    help="Run a link at a fraction of its bandwidth, both directions: gpu0-nic0=0.5 (half "
         "width). Repeatable.")

ROUTES = click.option(
    "--routes", type=click.Choice(["widest", "several"]), default=None,
    help="widest (the default): one route per GPU pair; several: also its other fewest-hop "
         "routes "
         "(a PCIe switch two GPUs share beside NVSwitch), which no runtime synth exports "
         "to can pin (docs/cli.md, \"Several routes\").")

# a degraded machine: wherever a topology is named, the same two edits and the routes
DEGRADED = apply(WITHOUT, DEGRADE, ROUTES)

ROOT = click.option("--root", type=click.IntRange(min=0), default=None, metavar="R",
                    help="Root rank of a rooted collective [0].")

TIME_LIMIT = click.option(
    "--time-limit", type=Seconds(), default=DEFAULT_TIME_LIMIT, show_default=True,
    help="Seconds for the whole command, counted from its start (docs/cli.md says how "
         "each command shares them).")

SOLVER = click.option("--solver", type=click.Choice(list(SOLVER_CHOICE)), default="auto",
                      show_default=True, help="Constraint solver of the exact search.")

MAX_STEPS = click.option(
    "--max-steps", type=click.IntRange(1, 64), default=None, metavar="S",
    help="Largest step count searched [hop bound + 3; allreduce 2x + 2].")

MAX_CHUNKS = click.option("--max-chunks", type=click.IntRange(1, 256), default=8,
                          show_default=True, metavar="C",
                          help="Largest chunks per share searched.")

METHOD = click.option(
    "--method", type=click.Choice(["auto", "exact", "decomposed", "constructed"]),
    default="auto", show_default=True,
    help="auto: on multi-node topologies, decompose into boxes and the network first, "
         "then search exactly in the time left (on at most 16 GPUs, or where nothing "
         "else was found); constructed: all but the exact search.")

# how a frontier is searched: the same four wherever one is
SEARCH = apply(MAX_STEPS, MAX_CHUNKS, METHOD, SOLVER)

MODEL = click.option(
    "--model", "cost_model", type=click.Choice(["calibrated", "line-rate"]),
    default="calibrated", show_default=True,
    help="The costs that choose and time schedules: calibrated is cost model 2 (the "
         "topology's figures, docs/cost-model.md); line-rate is the alpha-beta model of "
         "link line rates whose bounds and proofs are exact.")

SIZES = click.option("--sizes", type=Sizes(), default=DEFAULT_SIZES, show_default=True,
                     help="Message sizes (nccl-tests' n, binary units: 1KB = 1024 B).")

COLOR = click.option("--color", type=click.Choice(["chunk", "origin"]), default="chunk",
                     show_default=True,
                     help="Colour each chunk by itself or by the rank it starts at.")


def json_option(help: str = "Print one JSON object instead of the text."):
    return click.option("--json", "as_json", is_flag=True, help=help)


def say_kept(kept: list) -> None:
    """A note per file of the user's moved aside (synth.output_folder.keep_aside)."""
    for path, moved in kept:
        where = moved.name if moved.parent == path.parent else moved
        click.echo(f"synth: note: {path} was not synth's as it wrote it (yours, changed "
                   f"since, or in a folder with no list and not what this run writes): kept "
                   f"as {where}, and this run's file written in its place", err=True)
