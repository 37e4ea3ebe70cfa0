"""Ctrl-C during a frontier search stops at once and keeps what was found."""

import signal
import subprocess
import sys
import time


def test_sigint_keeps_found_points_and_exits_130(tmp_path):
    # allreduce on dgx1: the 2-step point comes within a second or two, the whole
    # search (3 steps, then the reducescatter and allgather phases) takes several more
    proc = subprocess.Popen(
        [sys.executable, "-m", "synth", "allreduce", "--topo", "dgx1",
         "--out", str(tmp_path), "--time-limit", "600", "--progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # wait for the first point
        seen.append(line)
        if line.strip().startswith("found S=2"):
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10, "Ctrl-C must stop the search within seconds"
    assert proc.returncode == 130, "".join(seen) + err
    assert "interrupted" in out and "Traceback" not in err
    written = sorted(p.name for p in (tmp_path / "dgx1" / "allreduce").glob("*.json"))
    # the 2-step point, and those found before the search (the baselines come first)
    assert any(name.startswith("allreduce-s2-") for name in written)
    check = subprocess.run([sys.executable, "-m", "synth", "verify",
                            *(str(tmp_path / "dgx1" / "allreduce" / w) for w in written)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
