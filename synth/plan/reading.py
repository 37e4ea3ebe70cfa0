"""load_workload: a workload file read as what it is, told apart by its content: a
PyTorch profiler trace (synth.plan.torch_trace), an NCCL_DEBUG log
(synth.plan.nccl_log), else the YAML form (synth.plan.workload).
"""

from __future__ import annotations

import re

from synth.files import TEXT_LIMIT, parse_yaml, read_text
from synth.plan.nccl_log import is_log, parse_log
from synth.plan.torch_trace import parse_trace
from synth.plan.workload import Workload, parse_workload
from synth.topology.physical import Topology


def load_workload(path: str, topo: Topology, steps: int = 1) -> Workload:
    """The workload in `path`: a profiler trace (JSON with traceEvents), an NCCL_DEBUG
    log (lines with "NCCL INFO"), else the YAML form; a trace's or log's counts are
    divided by the `steps` it holds. BadInput names the problem."""
    text = read_text(path, TEXT_LIMIT * 16, "workload")
    if _TRACE.match(text) or (text.lstrip()[:1] == "{" and "traceEvents" in text[:1 << 20]):
        return parse_trace(text, topo, path, steps)
    if is_log(text):
        return parse_log(text, topo, path, steps)
    return parse_workload(parse_yaml(text, path), topo, path)


# a JSON array of trace events; not a log whose lines a launcher tags "[1,0]<stdout>:"
_TRACE = re.compile(r"\s*\[\s*[{\]]")
