"""The runtime versions' limits (docs/runtimes.md, "Versions synth targets, and their
limits"): each limit rejects a file that passes it only by a little (a mutation of a
valid export), naming the version; synth's own files keep within them (a 16-GPU box's
allreduce sums 16 values, more than MSCCL++ v0.8.0's 8 operands); sizes a runtime would
read wrapped or refuse at load are refused with one line, or left to NCCL's own in a
plan's ranges, whose files every workload size selects whether the runtime reads the
upper bound as inclusive or exclusive. Small schedules and baselines only: the whole
file takes a few seconds.
"""

import copy
import json
import re
from functools import lru_cache

import pytest

from synth.construct.baselines import baselines
from synth.errors import BadInput
from synth.export import msccl as msccl_export
from synth.export import render
from synth.export.msccl_sim import MscclInvalid, check_msccl_xml
from synth.export.mscclpp_sim import PlanInvalid, check_mscclpp_plan
from synth.plan.planner import Candidate, Entry
from synth.plan.output import protected_sizes, runtime_files
from synth.plan.workload import Call
from synth.schedule.file import write_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from tests.in_process import synth_main

GIB = 1 << 30


@lru_cache(maxsize=None)
def baseline(topology, collective, algorithm):
    (found,) = [b.schedule for b in baselines(lower(resolve(topology)), collective)
                if b.algorithm == algorithm]
    return found


@pytest.fixture(scope="module")
def dgx2_plan():
    """The plan of the direct allreduce on one dgx2 box: each rank sums its shard's 16
    values (its own and 15 received)."""
    return json.loads(render(baseline("dgx2", "allreduce", "direct"), "mscclpp")[0])


def ops(plan):
    return [(r, j, i, op) for r, gpu in enumerate(plan["gpus"])
            for j, tb in enumerate(gpu["threadblocks"]) for i, op in enumerate(tb["ops"])]


# --- MSCCL++: operands ----------------------------------------------------------------

def test_a_16_gpu_allreduce_sums_in_chains_of_8_operands(dgx2_plan):
    reduces = [op for *_, op in ops(dgx2_plan) if op["name"] == "re"]
    widths = sorted({len(op["src_buff"]) for op in reduces})
    # 16 values: 8 in a first re, then the destination and 7 more, then it and the last
    # one (each re on a run of consecutive chunks)
    assert widths == [2, 8] and len(reduces) % 3 == 0
    assert all(len(op.get("dst_buff", ())) <= 8 for *_, op in ops(dgx2_plan))
    every = ops(dgx2_plan)  # a re, a nop, the next re of the chain summing into its sum
    chained = [(a, b) for (r, j, _, a), (r2, j2, _, b) in zip(every, every[2:])
               if a["name"] == b["name"] == "re" and (r, j) == (r2, j2)]
    assert len(chained) == 2 * len(reduces) // 3
    assert all(b["src_buff"][0] == a["dst_buff"][0] for a, b in chained)


def merged_chain(plan):
    """The plan with one re chain's first two links made one re of 9 sources (v0.9.0
    holds 10: the sum is still right there)."""
    plan = copy.deepcopy(plan)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            body = tb["ops"]
            for i, op in enumerate(body[:-2]):
                nxt = body[i + 2]
                if op["name"] == nxt["name"] == "re" and len(op["src_buff"]) == 8 \
                        and nxt["src_buff"][0] == op["dst_buff"][0]:
                    op["src_buff"].append(nxt["src_buff"].pop(1))
                    return plan
    raise AssertionError("no re chain")


def test_nine_sources_are_refused_naming_v0_8_0(dgx2_plan):
    with pytest.raises(PlanInvalid, match=r"src_buff: 9 entries, but MSCCL\+\+ v0\.8\.0 has "
                                          r"room for 8"):
        check_mscclpp_plan(merged_chain(dgx2_plan))


def test_nine_channel_ids_are_refused_in_every_release(dgx2_plan):
    plan = copy.deepcopy(dgx2_plan)
    nop = next(op for *_, op in ops(plan) if op["name"] == "nop")
    nop["channel_ids"] = list(range(9))
    with pytest.raises(PlanInvalid, match="9 ids, but every MSCCL\\+\\+ release has room "
                                          "for 8 per op"):
        check_mscclpp_plan(plan)


# --- MSCCL++: message sizes -----------------------------------------------------------

def largest_fitting(plan):
    """By hand: a message of n bytes has chunks of n / 16 / (chunks of the buffer the
    range measures) x 16 bytes; the largest buffer's end must stay within 2^32 - 1."""
    gpu = plan["gpus"][0]
    per = gpu["output_chunks"] if plan["collective"] == "allgather" else gpu["input_chunks"]
    most = max(max(g["input_chunks"], g["output_chunks"], g["scratch_chunks"])
               for g in plan["gpus"])
    return (2 ** 32 - 1) // most // 16 * 16 * per, 16 * per


def test_message_sizes_that_wrap_are_refused(dgx2_plan):
    top, step = largest_fitting(dgx2_plan)
    assert dgx2_plan["max_message_size"] == top and top > 2 ** 31

    def checked(**sizes):
        return check_mscclpp_plan({**dgx2_plan, **sizes}, launches=1)

    checked(min_message_size=2 ** 31 - 1)
    with pytest.raises(PlanInvalid, match=r"min_message_size=2147483648: every MSCCL\+\+ "
                                          r"release .* 32-bit signed int"):
        checked(min_message_size=2 ** 31)
    with pytest.raises(PlanInvalid, match="past the 32-bit offsets of every MSCCL"):
        checked(max_message_size=top + step)
    plan = dict(dgx2_plan)
    del plan["max_message_size"]
    with pytest.raises(PlanInvalid, match="no max_message_size"):
        check_mscclpp_plan(plan, launches=1)


def test_the_exporter_refuses_sizes_a_release_would_misread(dgx2_plan):
    schedule = baseline("dgx2", "allreduce", "direct")
    top, _ = largest_fitting(dgx2_plan)
    with pytest.raises(BadInput, match="32-bit signed int"):
        render(schedule, "mscclpp", min_bytes=2 ** 31)
    with pytest.raises(BadInput, match=f"past {top} bytes"):
        render(schedule, "mscclpp", max_bytes=top + 1)
    plan = json.loads(render(schedule, "mscclpp", min_bytes=2 ** 31 - 1, max_bytes=top)[0])
    assert (plan["min_message_size"], plan["max_message_size"]) == (2 ** 31 - 1, top)


def test_export_command_says_so_in_one_line(tmp_path):
    src = write_schedule(baseline("ring:4", "allreduce", "ring"), tmp_path / "ar.json")
    for fmt, args, words in (
            ("mscclpp", ["--min-bytes", str(2 ** 31)], "32-bit signed int"),
            ("mscclpp", ["--max-bytes", str(2 ** 40)], "32-bit"),
            ("msccl-xml", ["--min-bytes", "1024"], "give --max-bytes"),
            ("msccl-xml", ["--max-bytes", str(2 ** 63)], "64-bit"),
            # 8 chunks: the plan runs multiples of 8 x 16 = 128 bytes, the XML of 8
            # one-byte elements; a range that holds none was written, never to be picked
            ("mscclpp", ["--min-bytes", "129", "--max-bytes", "255"], "would ever pick it"),
            ("msccl-xml", ["--min-bytes", "1025", "--max-bytes", "1031"],
             "would ever pick it"),
            # from 0 bytes up to less than one cut: only a call of 0 bytes, none at all
            ("mscclpp", ["--max-bytes", "127"], "would ever pick it"),
            ("msccl-xml", ["--max-bytes", "7"], "would ever pick it")):
        bad = synth_main("export", src, "--to", fmt, *args, "-o", tmp_path / "no.out")
        assert bad.returncode == 2, (args, bad.stderr)
        assert bad.stderr.count("\n") == 1 and words in bad.stderr, bad.stderr
    assert not (tmp_path / "no.out").exists()
    # the schedule file has no layout, name or sizes: they were ignored without a word
    bad = synth_main("export", src, "--to", "json", "--inplace", "--min-bytes", "64",
                     "-o", tmp_path / "no.out")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--inplace, --min-bytes: for msccl-xml and mscclpp only" in bad.stderr
    assert not (tmp_path / "no.out").exists()
    ok = synth_main("export", src, "--to", "msccl-xml", "--min-bytes", "1024",
                    "--max-bytes", "4096", "-o", tmp_path / "ar.xml")
    assert ok.returncode == 0, ok.stderr
    assert 'minBytes="1024" maxBytes="4096"' in (tmp_path / "ar.xml").read_text()


# --- MSCCL XML ------------------------------------------------------------------------

def three_gpu_allreduce():
    """A hand-written allreduce on 3 GPUs, 2 chunks: each GPU sends its input to both
    peers (one threadblock each), copies it to its output after a nop and a wait for the
    second receive, and adds the two received pairs with two re steps into o[0], which
    the loaders fuse into one."""
    lines = ['<algo name="a" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="3" '
             'coll="allreduce" inplace="0" outofplace="1" minBytes="0" maxBytes="0">']

    def step(s, kind, src, dst, cnt=2, dep=(-1, -1), hasdep=0):
        return (f'<step s="{s}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1]}" '
                f'dstbuf="{dst[0]}" dstoff="{dst[1]}" cnt="{cnt}" depid="{dep[0]}" '
                f'deps="{dep[1]}" hasdep="{hasdep}"/>')

    for r in range(3):
        a, b = (r + 1) % 3, (r + 2) % 3
        lines += [f'<gpu id="{r}" i_chunks="2" o_chunks="2" s_chunks="4">',
                  f'<tb id="0" send="{a}" recv="{b}" chan="0">',
                  step(0, "s", ("i", 0), ("i", 0)), step(1, "r", ("s", 0), ("s", 0)),
                  step(2, "nop", ("i", -1), ("o", -1), cnt=1, dep=(1, 0)),
                  step(3, "cpy", ("i", 0), ("o", 0), dep=(1, 1)),
                  step(4, "re", ("s", 0), ("o", 0)), step(5, "re", ("s", 2), ("o", 0)),
                  '</tb>', f'<tb id="1" send="{b}" recv="{a}" chan="0">',
                  step(0, "s", ("i", 0), ("i", 0), hasdep=1),
                  step(1, "r", ("s", 2), ("s", 2), hasdep=1), '</tb>', '</gpu>']
    return "\n".join(lines + ["</algo>"]) + "\n"


def test_the_hand_written_allreduce_loads_everywhere():
    report = check_msccl_xml(three_gpu_allreduce())
    assert report["loaded_by"] == ["msccl-executor-nccl", "RCCL", "microsoft/msccl"]


NOP = ('<step s="2" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="1" '
       'depid="1" deps="0" hasdep="0"/>')
COPY = ('<step s="3" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" '
        'depid="1" deps="1" hasdep="0"/>')
SECOND_RE = '<step s="5" type="re" srcbuf="s" srcoff="2" dstbuf="o" dstoff="0" cnt="2"'


@pytest.mark.parametrize("old, new, message", [
    ('minBytes="0"', 'minBytes="1"',
     'minBytes=1 is above maxBytes=0: microsoft/msccl refuses the file'),
    ('maxBytes="0"', f'maxBytes="{2 ** 63}"', "does not fit the 64-bit int"),
    ('s_chunks="4"', f's_chunks="{2 ** 31}"', "does not fit the 32-bit int"),
    (NOP, NOP.replace('depid="1" deps="0"', 'depid="-1" deps="-1"'),
     "a nop without a dependency"),
    (NOP, NOP.replace('hasdep="0"', 'hasdep="1"'), "hasdep on a nop"),
    (COPY, COPY.replace('depid="1" deps="1"', 'depid="-1" deps="-1"'),
     "follows a nop but has no dependency of its own"),
    (SECOND_RE, SECOND_RE.replace('cnt="2"', 'cnt="1"'),
     "fuse this re into the one before it .* with cnt=1, not 2"),
])
def test_what_the_loaders_would_read_otherwise_is_refused(old, new, message):
    text = three_gpu_allreduce()
    assert old in text
    with pytest.raises(MscclInvalid, match=message):
        check_msccl_xml(text.replace(old, new))


def test_a_threadblock_ending_in_a_nop_is_refused():
    text = three_gpu_allreduce()
    tail = text.index("<step s=\"3\"")
    cut = text[:tail] + text[text.index("</tb>", tail):]
    with pytest.raises(MscclInvalid, match="ends with a nop"):
        check_msccl_xml(cut)


def test_offsets_past_16_bits_are_refused():
    # the same program on buffers of 2^15 + 2 chunks, the second pair received at offset
    # 32766 (the last pair an int16 offset reaches) or 32768 (past it)
    text = three_gpu_allreduce().replace('nchunksperloop="2"', 'nchunksperloop="32770"')
    text = text.replace('i_chunks="2" o_chunks="2" s_chunks="4"',
                        'i_chunks="32770" o_chunks="32770" s_chunks="32770"')
    assert text.count('off="2"') == 9  # the second receive (both operands), its re, x 3

    # within 16 bits it loads and runs; only the chunks it never moves are missing
    with pytest.raises(MscclInvalid, match=r"gpu 0 ends with o\[2\] = nothing"):
        check_msccl_xml(text.replace('off="2"', 'off="32766"'))
    with pytest.raises(MscclInvalid, match="srcoff=32768, but the runtimes keep a step's "
                                           "offsets in 16 bits"):
        check_msccl_xml(text.replace('off="2"', 'off="32768"'))


def test_the_xml_exporter_refuses_buffers_past_16_bits(monkeypatch):
    monkeypatch.setattr(msccl_export, "MAX_BUFFER", 2)
    with pytest.raises(BadInput, match="keep a step's offsets in 16 bits"):
        render(baseline("ring:4", "allreduce", "ring"), "msccl-xml")


def test_xml_without_an_upper_limit_needs_no_lower_one():
    schedule = baseline("ring:4", "allreduce", "ring")
    with pytest.raises(BadInput, match="microsoft/msccl reads maxBytes"):
        render(schedule, "msccl-xml", min_bytes=16)
    text = render(schedule, "msccl-xml", min_bytes=16, max_bytes=1 << 20)[0]
    assert check_msccl_xml(text)["loaded_by"][-1] == "microsoft/msccl"
    rs = render(baseline("ring:4", "reducescatter", "ring"), "msccl-xml")[0]
    assert check_msccl_xml(rs)["loaded_by"] == ["msccl-executor-nccl", "RCCL"]


# --- synth plan's ranges --------------------------------------------------------------

def entry_with_crossing(at_bytes, call_bytes):
    """An allreduce entry on ring:4 whose one candidate file (the ring) overtakes NCCL's
    own at `at_bytes` (latency at_bytes x 1e-6 us more, 1e-6 us per byte less), with one
    call of `call_bytes`."""
    ring = baseline("ring:4", "allreduce", "ring")
    mine = Candidate("ring file", ring, latency_us=at_bytes * 1e-6, us_per_byte=1e-6)
    theirs = Candidate("ring", ring, latency_us=0.0, us_per_byte=2e-6)
    return Entry("all", "allreduce", None, 4, "ring:4", None, [mine], [theirs], [],
                 [Call("all", "allreduce", call_bytes, call_bytes)], [list(range(4))])


def tiles(ranges):
    assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] is None
    assert all(b["min_bytes"] == a["max_bytes"] + 1 for a, b in zip(ranges, ranges[1:]))
    return [f for f in ranges if f["text"] is not None]


def test_plan_files_start_where_every_release_reads_the_start():
    big = 3 * GIB
    # the file is the fastest from 2.4e9 bytes, past 2^31: MSCCL++ cannot start a plan
    # there, so NCCL's own keeps it; the XML file runs from there to the call's size,
    # its maxBytes one past it (microsoft/msccl reads it as exclusive)
    assert tiles(runtime_files(entry_with_crossing(2.4e9, big), "mscclpp")) == []
    (xml,) = tiles(runtime_files(entry_with_crossing(2.4e9, big), "msccl-xml"))
    assert abs(xml["min_bytes"] - 2.4e9) <= 2 and xml["max_bytes"] == big
    assert f'minBytes="{xml["min_bytes"]}" maxBytes="{big + 1}"' in xml["text"]
    assert check_msccl_xml(xml["text"])["loaded_by"][-1] == "microsoft/msccl"
    # from 1e9 bytes, below 2^31, the plan starts there too
    (plan,) = tiles(runtime_files(entry_with_crossing(1e9, big), "mscclpp"))
    doc = json.loads(plan["text"])
    assert abs(doc["min_message_size"] - 1e9) <= 2 < 2 ** 31
    # up to its 32-bit limit: in place, as a plan's allreduce is written (since
    # 2026-12-05), under 3 GiB, so NCCL's own runs the call
    assert doc["max_message_size"] == plan["max_bytes"] < big
    last = runtime_files(entry_with_crossing(1e9, big), "mscclpp")[-1]
    assert last["text"] is None and last["max_bytes"] is None
    check_mscclpp_plan(doc, launches=1)


def entry_with_own_above(at_bytes, call_bytes):
    """As entry_with_crossing, but the ring file is the faster up to `at_bytes` (no
    latency, 2^-19 us per byte) and NCCL's own above (at_bytes x 2^-20 us more, 2^-20 us
    per byte: equal at at_bytes, exactly in floats, where the envelope keeps the file)."""
    from dataclasses import replace

    entry = entry_with_crossing(0, call_bytes)
    (mine,), (theirs,) = entry.candidates, entry.reference
    return replace(entry, candidates=[replace(mine, latency_us=0.0, us_per_byte=2 ** -19)],
                   reference=[replace(theirs, latency_us=at_bytes * 2 ** -20,
                                      us_per_byte=2 ** -20)])


def selected(ranges, fmt, n, exclusive):
    """The files a runtime runs for an allreduce of n bytes of float32, read from their
    text: within [minBytes, maxBytes] (maxBytes="0": no limit) or within
    [min_message_size, max_message_size], the upper bound inclusive or `exclusive`;
    MSCCL: n / 4 a multiple of nchunksperloop; MSCCL++: n a multiple of 16 bytes x its
    chunks."""
    out = []
    for f in ranges:
        if f["text"] is None:
            continue
        if fmt == "msccl-xml":
            low, top, loop = (int(re.search(rf'{key}="(\d+)"', f["text"]).group(1))
                              for key in ("minBytes", "maxBytes", "nchunksperloop"))
            top, cut = top or None, (n // 4) % loop == 0 and n % 4 == 0
        else:
            plan = json.loads(f["text"])
            low, top = plan["min_message_size"], plan["max_message_size"]
            cut = n % (16 * plan["gpus"][0]["input_chunks"]) == 0
        if cut and low <= n and (top is None or n < top or (n == top and not exclusive)):
            out.append(f)
    return out


@pytest.mark.parametrize("fmt", ["msccl-xml", "mscclpp"])
@pytest.mark.parametrize("make, at, call", [
    (entry_with_crossing, 2.4e9, 3 * GIB),        # the file's range ends at the call
    (entry_with_own_above, 1 << 20, 1 << 20),     # ... below NCCL's own
    (entry_with_own_above, (1 << 20) - 1, 1 << 20),  # the call on the byte after it
])
def test_every_workload_size_runs_its_file_whether_the_bound_is_inclusive_or_not(
        fmt, make, at, call):
    # msccl-executor-nccl, RCCL and MSCCL++ v0.9 and later read the upper bound as
    # inclusive; microsoft/msccl and MSCCL++ v0.8.0's shim as exclusive
    from dataclasses import replace

    entry = make(at, call)
    entry = replace(entry, calls=entry.calls + [Call("all", "allreduce", 1024, 1024)])
    ranges = runtime_files(entry, fmt)
    assert any(f["text"] is not None for f in ranges) or \
        (fmt, at) == ("mscclpp", 2.4e9)  # MSCCL++ starts no plan past 2^31 (above)
    for n in protected_sizes(entry):  # the workload's sizes: 1 KiB and the call's
        (meant,) = [f for f in ranges if f["min_bytes"] <= n <= (f["max_bytes"] or n)]
        for exclusive in (False, True):
            runs = selected(ranges, fmt, n, exclusive)
            assert runs == ([meant] if meant["text"] is not None else []), \
                (n, exclusive, [(f["min_bytes"], f["max_bytes"]) for f in ranges])
    if make is entry_with_own_above:
        # the call of 1 MiB is the file's: below NCCL's own from 1 MiB + 1 byte, or
        # where NCCL's own would start at 1 MiB, on the byte an inclusive reader runs
        # the file for anyway, given to the file
        (f,) = tiles(ranges)
        assert (f["min_bytes"], f["max_bytes"]) == (0, 1 << 20)
        assert f["unit"].cuts(1 << 20) and not f["unit"].cuts((1 << 20) + 1)
        assert ('minBytes="0" maxBytes="1048577"' in f["text"] if fmt == "msccl-xml"
                else json.loads(f["text"])["max_message_size"] == (1 << 20) + 1)


def test_two_files_crossing_exactly_on_a_workload_size_keep_their_own_ranges():
    # a: 2^-19 us a byte; b: 2^20 x 2^-20 us more, 2^-20 us a byte: equal at 1 MiB,
    # exactly in floats, a call of that size and the largest (no file serves above it);
    # NCCL's own far slower. The envelope keeps 1 MiB in a's span, and the call's choice
    # must be a too: b there split the span and took every size below where it beats
    # NCCL's own, a's included (a reviewer's)
    from dataclasses import replace

    entry = entry_with_crossing(0, 1 << 20)
    (ring,), (theirs,) = entry.candidates, entry.reference
    a = replace(ring, label="a", latency_us=0.0, us_per_byte=2 ** -19)
    b = replace(ring, label="b", latency_us=(1 << 20) * 2 ** -20, us_per_byte=2 ** -20)
    assert a.time_us(1 << 20) == b.time_us(1 << 20)
    entry = replace(entry, candidates=[b, a],  # b first: list order favoured it
                    reference=[replace(theirs, latency_us=1e6, us_per_byte=1e-3)])
    ranges = [(f["min_bytes"], f["max_bytes"], f["algorithm"])
              for f in runtime_files(entry, "msccl-xml")]
    assert ranges == [(0, 1 << 20, "a"), ((1 << 20) + 1, None, "NCCL's own (ring)")]
