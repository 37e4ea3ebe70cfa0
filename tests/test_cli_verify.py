"""`synth verify`: exit 0 valid, 1 invalid with the reason, 2 not a schedule."""

import json

from synth.schedule.file import schedule_to_dict
from tests.in_process import synth_main
from tests.test_schedule import ring_allgather


def write(path, doc):
    path.write_text(json.dumps(doc))
    return str(path)


def test_verify_exit_codes(tmp_path):
    good = schedule_to_dict(ring_allgather(4))
    broken = json.loads(json.dumps(good))
    broken["steps"][1]["sends"].pop()  # someone never gets a chunk
    good_path, broken_path = write(tmp_path / "good.json", good), write(tmp_path / "bad.json", broken)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")

    ok = synth_main("verify", good_path)
    assert ok.returncode == 0 and ok.stdout.startswith("ok ") and ok.stderr == ""

    bad = synth_main("verify", good_path, broken_path)
    assert bad.returncode == 1
    assert "step 2: chunk 2 sent from rank 0 to rank 1, but rank 0 does not hold it" in bad.stderr
    assert bad.stderr.count("\n") == 1

    worst = synth_main("verify", broken_path, str(junk))
    assert worst.returncode == 2 and worst.stderr.count("\n") == 2
    assert "Traceback" not in worst.stderr
    # a file that is no JSON says so in synth's words, and an XML file what it is
    assert "junk.json: cannot read a schedule: not valid JSON (line 1)" in worst.stderr
    xml = tmp_path / "allgather.xml"
    xml.write_text('<algo name="x" proto="Simple" nchunksperloop="4" ngpus="4">\n</algo>\n')
    said = synth_main("verify", str(xml))
    assert said.returncode == 2 and said.stderr.endswith(
        "not valid JSON (line 1) (MSCCL XML: verify the schedule .json it was exported "
        "from)\n")


def test_verify_cost_prints_time_and_algbw(tmp_path):
    path = write(tmp_path / "good.json", schedule_to_dict(ring_allgather(4)))
    result = synth_main("verify", "--cost", "--sizes", "1MB", path)
    assert result.returncode == 0
    # 3 x 0.7 us + 3/4 x 1 MiB / 25 GB/s = 33.56 us
    assert "line-rate model: latency 2.10 us" in result.stdout and "1MB 33.6 us" in result.stdout


def test_missing_file_is_bad_input(tmp_path):
    result = synth_main("verify", str(tmp_path / "none.json"))
    assert result.returncode == 2 and "none.json" in result.stderr
