"""Alpha-beta cost of a schedule (docs/schedule-file.md, "Message size and cost").

A step costs the largest alpha among the links it uses, plus its rounds times one
chunk's time at the unit bandwidth. A chunk is n / buffer_chunks bytes, n being the
per-rank buffer nccl-tests sizes by, so

    time(n) = latency_us + us_per_byte * n

and Pareto comparisons use the pair (latency_us, us_per_byte).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from synth.errors import BadInput
from synth.files import quote
from synth.schedule.ir import Schedule


@dataclass(frozen=True)
class Cost:
    latency_us: float  # sum over steps of the step's alpha
    us_per_byte: float  # bandwidth term: rounds x chunk time, per byte of n

    def time_us(self, nbytes: float) -> float:
        return self.latency_us + self.us_per_byte * nbytes

    def algbw_gbps(self, nbytes: float) -> float:
        """nccl-tests' algorithm bandwidth: n / time, in GB/s."""
        return nbytes / self.time_us(nbytes) / 1e3

    def dominates(self, other: "Cost") -> bool:
        return (self.latency_us <= other.latency_us and self.us_per_byte <= other.us_per_byte
                and self != other)


def _program_alphas(schedule: Schedule) -> list[float]:
    links = schedule.model.link
    return [max([links[(s.src, s.dst)].alpha_us for s in step.sends]
                + [links[pair].alpha_us for op in step.switch_ops for pair in op.pairs()],
                default=0.0)
            for step in schedule.steps]


def schedule_cost(schedule: Schedule) -> Cost:
    """Latency and bandwidth of the expanded schedule: a pipelined step's alpha is the
    largest of the program steps active in it. O(program + expanded steps x batches in
    flight)."""
    alphas = _program_alphas(schedule)
    latency = sum(max((alphas[i] for _, i in schedule.active(t)), default=0.0)
                  for t in range(schedule.num_steps))
    # one round moves one chunk at unit_gbps GB/s = unit_gbps * 1e3 bytes per us
    chunk_us_per_byte = 1.0 / (schedule.collective.buffer_chunks * schedule.model.unit_gbps * 1e3)
    return Cost(latency, schedule.rounds * chunk_us_per_byte)


def cost_summary(schedule: Schedule) -> dict:
    """The "cost" object of the schedule file."""
    cost = schedule_cost(schedule)
    return {
        "steps": schedule.num_steps,
        "rounds": schedule.rounds,
        "chunks": schedule.collective.chunks,
        "latency_us": round(cost.latency_us, 6),
        "us_per_mb": round(cost.us_per_byte * 1e6, 6),
    }


MAX_SIZE = 1 << 50  # bytes: a message of a petabyte is a typo

SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
              "G": 1 << 30, "GB": 1 << 30}


def parse_size(text: str, bound: bool = False) -> int:
    """'64MB' -> 67108864 bytes. Units are binary, as nccl-tests' -b/-e flags are.
    bound: a limit on sizes (export's --min-bytes, --max-bytes), not a message: 0 is
    allowed and there is no upper end (the exporter says what its runtime holds)."""
    # KiB, MiB and GiB too: the same binary units by their IEC names (64MiB = 64MB here)
    m = re.fullmatch(r"\s*(\d{1,20}(?:\.\d{1,20})?)\s*((?:[KMG]I?)?B?)\s*", text.upper())
    if not m:
        raise BadInput(f"size {quote(text)}: expected a number with an optional unit (KB, "
                       "MB, GB, or KiB, MiB, GiB: both binary)")
    number, scale = m.group(1), SIZE_UNITS[m.group(2).replace("I", "")]
    exact = Fraction(number) * scale  # exactly: 1.5KB is 1536 bytes
    if exact.denominator != 1:  # 1.5B was taken as 1 byte without a word
        raise BadInput(f"size {quote(text)}: {float(exact):g} bytes is not a whole number "
                       "of bytes")
    nbytes = int(exact)
    if bound:
        return nbytes
    if not 0 < nbytes <= MAX_SIZE:
        raise BadInput(f"size {quote(text)}: expected from 1 byte to 1 PB")
    return nbytes


def format_size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def per_chunk(rounds) -> str:
    """'1 round per chunk', '3/4 rounds per chunk': a bound's rounds in words (a
    Fraction, or its text)."""
    return f"{rounds} round{'' if Fraction(str(rounds)) == 1 else 's'} per chunk"
