"""Internal errors are loud: something synth made that fails its own checks (an export
its runtime's simulator, a composed schedule its verifier), or an exception nobody
expected, ends the command with exit 3 and one line that says to report it; it is
never bad input (exit 2) and never dropped. Each path is forced here by breaking the
part that made the thing, in process."""

import pytest

import synth.exact
import synth.export.msccl_sim
import synth.export.mscclpp_sim
import synth.topology.catalog
from synth.cli import main
from synth.errors import SynthError
from synth.schedule.ir import Schedule
from tests.test_hostile_inputs import WORKLOAD


def run(argv, capsys):
    with pytest.raises(SystemExit) as ended:
        main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("synth: error: internal error: "), err
    assert "please report it" in err and "Traceback" not in err
    return ended.value.code, err


def simulator_says_no(*args, **kwargs):
    raise SynthError("rank 0 reads a chunk no one wrote")


@pytest.fixture
def broken_simulators(monkeypatch):
    monkeypatch.setattr(synth.export.msccl_sim, "check_msccl_xml", simulator_says_no)
    monkeypatch.setattr(synth.export.mscclpp_sim, "check_mscclpp_plan", simulator_says_no)


def test_an_export_its_simulator_refuses_is_an_internal_error(broken_simulators, capsys,
                                                              tmp_path):
    code, err = run(["allgather", "--topo", "ring:4", "--out", str(tmp_path),
                     "--format", "json,msccl-xml", "--time-limit", "10"], capsys)
    assert code == 3 and "MSCCL XML fails its simulator" in err


def test_a_plan_whose_export_fails_stops_instead_of_dropping_the_file(
        broken_simulators, capsys, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    code, err = run(["plan", str(workload), "--topo", "ring:4", "-o", str(tmp_path / "p"),
                     "--time-limit", "10"], capsys)
    assert code == 3 and "fails its simulator" in err
    assert not (tmp_path / "p").exists()


def test_a_composition_the_verifier_refuses_is_an_internal_error(monkeypatch, capsys,
                                                                 tmp_path):
    real = synth.exact.compose_allreduce

    def losing_the_allgather(rs, ag):  # what refine's old bug amounted to
        made = real(rs, ag)
        return Schedule(made.collective, made.model, rs.steps, made.info)

    monkeypatch.setattr(synth.exact, "compose_allreduce", losing_the_allgather)
    code, err = run(["allreduce", "--topo", "ring:4", "--out", str(tmp_path),
                     "--time-limit", "20"], capsys)
    assert code == 3 and "fails verification" in err


def test_an_unexpected_exception_is_one_line_and_exit_3(monkeypatch, capsys):
    def broken(*args, **kwargs):
        return 1 // 0

    monkeypatch.setattr(synth.topology.catalog, "resolve", broken)
    code, err = run(["topo", "show", "dgx1"], capsys)
    assert code == 3 and "ZeroDivisionError" in err and "SYNTH_TRACEBACK=1" in err
