"""nccl-tests output as printed: which collective, how many GPUs, and its rows.

A log is what all_reduce_perf (all_gather_perf, reduce_scatter_perf, alltoall_perf,
broadcast_perf, reduce_perf) prints: a `# nThread ... nGpus ... graph: G` header (nGpus
the GPUs one thread launches, -g; G the CUDA graph launches, -G, 0 when off), one
`#  Rank  r Group ... device` line per GPU, then one row per size:

    size  count  type  [redop  [root]]  time algbw busbw #wrong  time algbw busbw #wrong

(out-of-place, then in-place; #wrong may be N/A). Lines of NCCL_DEBUG=INFO may be mixed
in, and mpirun --tag-output may prefix each line with [job,rank]<stdout>:. The
collective is read from the log (`Collective test starting: all_reduce_perf`, the
command line) or the file's name; NCCL_ALGO / NCCL_PROTO set in the environment are read
from NCCL's INFO lines ("NCCL_ALGO set by environment to Ring").

Cost: one pass over the text, O(its length).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from synth.errors import BadInput
from synth.files import quote, read_text
from synth.schedule.cost import MAX_SIZE

NAMES = {"all_reduce": "allreduce", "all_gather": "allgather",
         "reduce_scatter": "reducescatter", "alltoall": "alltoall",
         "broadcast": "broadcast", "reduce": "reduce"}
# not \b: "_" is a word character, and nccl_all_reduce_perf.log or all_reduce_perf_8gpu
# named no collective
PROGRAM = re.compile(r"(?<![A-Za-z0-9])(all_reduce|all_gather|reduce_scatter|alltoall|"
                     r"broadcast|reduce)_perf(?![A-Za-z0-9])")
TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\b.*\bdevice\b(?:\s+\d+\s+\[[^\]]*\]\s+(.+))?")
ENV = re.compile(r"NCCL_(ALGO|PROTO) set by environment to (\S+)")
VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
GPUS = re.compile(r"^#\s*nThreads?\s+\d+\s+nGpus\s+(\d+)\b")
GRAPH = re.compile(r"\bgraph:\s*(\d+)\b")  # on the nGpus line
TYPES = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
         "bfloat16", "fp8_e4m3", "fp8_e5m2"}
OPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum"}
ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
              "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain", "pat": "pat"}
PROTOCOLS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
MIN_US, MAX_US = 1e-3, 1e9  # a row's time: nccl-tests prints 0.01 us at least; 1000 s


@dataclass(frozen=True)
class Row:
    nbytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    line: int


@dataclass
class Log:
    path: str
    collective: str
    ranks: int
    rows: list[Row] = field(default_factory=list)
    algorithm: str = ""  # allowed by NCCL_ALGO ("ring" or "ring,tree"; "" when all)
    protocol: str = ""  # allowed by NCCL_PROTO
    nccl_version: str = ""
    gpus_per_thread: int = 1  # the header's nGpus: GPUs one thread launches (-g)
    graph_launches: int = 0  # the header's graph: -G, iterations replayed as a CUDA graph
    devices: frozenset[str] = frozenset()  # the GPUs' names its Rank lines give

    @property
    def launches(self) -> int:
        """The host launches a call waits for (docs/cost-model.md, "A call as nccl-tests
        times it"): a GPU's part per GPU of the thread, none when a CUDA graph replays."""
        return 0 if self.graph_launches else self.gpus_per_thread


def read_log(path: str | Path, collective: str | None = None) -> Log:
    """The log at `path` (module docstring); BadInput naming the file and line."""
    path = Path(path)
    return parse_log(read_text(path, what="nccl-tests log"), str(path), collective)


def parse_log(text: str, where: str, collective: str | None = None) -> Log:
    ranks: set[int] = set()
    devices: set[str] = set()
    runs: dict[str, set] = {"program": set(), "ALGO": set(), "PROTO": set(), "header": set()}
    version, rows, per_thread, graph = "", [], 1, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = TAG.sub("", raw).strip()
        runs["program"].update(filter(None, [_program(line)]))
        version = version or _version(line)
        g = GPUS.match(line)
        if g:
            runs["header"].add(number)
            per_thread = max(1, int(g.group(1)))
            launched = GRAPH.search(line)
            graph = int(launched.group(1)) if launched else 0
        for key, value in ENV.findall(line):
            runs[key].add(value)
        m = RANK.match(line)
        if m:
            ranks.add(int(m.group(1)))
            devices.update(filter(None, [m.group(2)]))
        elif line and " NCCL " not in line and _a_row(line):
            rows.append(_row(line, number, where))
    _one_run(runs, where)
    program = next(iter(runs["program"]), None)
    found = {key: next(iter(runs[key]), "") for key in ("ALGO", "PROTO")}
    # the log, then its name, then --collective, for the logs that do not say (docs/
    # cli.md): the flag took precedence, so an allreduce log given among others with
    # --collective alltoall was fitted as an alltoall
    coll = program or _program(Path(where).name) or collective
    if coll is None:
        raise BadInput(f"{where}: cannot tell which collective the log measured (no "
                       "'..._perf' in it or its name); give --collective")
    if not ranks:
        raise BadInput(f"{where}: no '#  Rank N Group ... device' lines: not nccl-tests "
                       "output, or cut before its header")
    if not rows:
        raise BadInput(f"{where}: no result rows (size count type ... time algbw busbw)")
    return Log(where, coll, len(ranks), rows, _forced(found["ALGO"], ALGORITHMS, where),
               _forced(found["PROTO"], PROTOCOLS, where), version, per_thread, graph,
               frozenset(devices))


def _one_run(runs: dict[str, set], where: str) -> None:
    """BadInput where the log holds more than one run: headers, programs, NCCL_ALGO or
    NCCL_PROTO more than one (logs of an LL and a Simple run in one file were fitted
    as Simple throughout, 34% off at the median, without a word)."""
    headers = sorted(runs.pop("header"))
    many = [f"{len(v)} {k if k == 'program' else 'NCCL_' + k} values ({', '.join(sorted(v))})"
            for k, v in runs.items() if len(v) > 1]
    if len(headers) > 1:
        many.insert(0, f"{len(headers)} headers (lines {', '.join(map(str, headers[:4]))})")
    if many:
        raise BadInput(f"{where}: more than one nccl-tests run in one log: "
                       f"{'; '.join(many)}; give each run its own file")


# a GPU's name as its Rank line gives it -> (the architecture whose tables cost model 2
# uses, the library): synth.topology.importing.hardware's, by product name
DEVICE_KINDS = ((r"MI3\d\d", ("hopper", "rccl")), (r"MI2\d\d", ("ampere", "rccl")),
                (r"\bG?B[123]00\b", ("blackwell", "nccl")),
                (r"\bG?H(100|200|800|20)\b", ("hopper", "nccl")),
                (r"\bA(100|800|30|10)\b", ("ampere", "nccl")), (r"\bV100\b", ("volta", "nccl")))


def device_kind(name: str) -> tuple[str, str] | None:
    """(arch, library) of a GPU named as nccl-tests prints it ("NVIDIA A100-SXM4-80GB",
    "AMD Instinct MI300X"); None for one synth does not know."""
    return next((kind for pattern, kind in DEVICE_KINDS if re.search(pattern, name)), None)


def _program(line: str) -> str | None:
    m = PROGRAM.search(line)
    return NAMES[m.group(1)] if m else None


def _version(line: str) -> str:
    m = VERSION.search(line)
    return m.group(1) if m else ""


def _forced(value: str, names: dict, where: str) -> str:
    """The algorithms or protocols NCCL_ALGO / NCCL_PROTO allow, in synth's names and
    comma-separated ("ring,tree"); "" when unset, an exclusion ("^LL128") or per
    collective ("allreduce:tree"), where NCCL chose among more."""
    if not value or value.startswith("^") or ":" in value or ";" in value:
        return ""
    out = []
    for part in value.split(","):
        key = part.strip().lower()
        if key not in names:
            raise BadInput(f"{where}: NCCL_ALGO/NCCL_PROTO {quote(value)} names "
                           f"{quote(part.strip())}, none synth knows "
                           f"({', '.join(sorted(names))})")
        out.append(names[key])
    return ",".join(out)


def _a_row(line: str) -> bool:
    """Whether the line is meant as a result row (then _row checks it): it begins with
    a digit, or its third field is a data type. A row whose size was "-1048576" or
    "abc1" was skipped in silence, and the fit ran on the rest."""
    fields = line.split()
    return line[0].isdigit() or (len(fields) > 3 and fields[2] in TYPES)


def _row(line: str, number: int, where: str) -> Row:
    """One result row: size, count, type, [redop, [root]], then time algbw busbw."""
    t = line.split()
    try:
        nbytes = int(t[0])
        int(t[1])
        if t[2] not in TYPES:
            raise ValueError(t[2])
        i = 3
        if i < len(t) and t[i] in OPS:
            i += 1
        if i < len(t) and re.fullmatch(r"-?\d+", t[i]) and i + 3 < len(t):
            i += 1  # root
        time_us, algbw, busbw = (float(x) for x in t[i:i + 3])
    except (IndexError, ValueError):
        raise BadInput(f"{where}: line {number}: not a result row of nccl-tests: "
                       f"{quote(line[:80])}") from None
    # finite and within what a call can take: nan and inf passed `<= 0`, and a time
    # of 1e-308 us made the fit's residuals infinite (exit 3); sizes as --size's
    if not (0 < nbytes <= MAX_SIZE and MIN_US <= time_us <= MAX_US):
        raise BadInput(f"{where}: line {number}: expected a size from 1 B to 1 PB and a "
                       f"time from {MIN_US:g} to {MAX_US:g} us")
    return Row(nbytes, time_us, algbw, busbw, number)
