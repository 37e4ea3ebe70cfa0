"""The package's layout is its architecture (README "Layout"): these tests keep it so.

- Stages import only from earlier stages (or their own), so the folders read in the
  order data flows through the pipeline.
- The independent checkers (the verifier and the two runtime simulators) import nothing
  of synth's beyond synth.errors and each other: an encoder or exporter bug must not be
  able to hide behind a helper they share.
- No import cycle, not even one hidden by an import inside a function: each module's
  imports, followed, never lead back to it.
- Rooms that fit (issue 30): no function longer than a reader holds in mind (about 80
  lines; 90 at most), and no module over 500 lines unless its docstring says why
  ("Long because: ...").
- `synth --help` stays quick: importing the command line loads no solver, SciPy,
  matplotlib or torch.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "synth"

# The pipeline's stages, earliest first. A module may import from its own stage and
# from earlier ones only.
STAGES = [
    ["synth", "synth.errors", "synth.files", "synth.signals"],
    ["synth.topology"],
    ["synth.schedule"],
    ["synth.bounds"],
    ["synth.predict"],  # after the bounds: NCCL's alltoall is never faster than they allow
    ["synth.search"],
    ["synth.construct"],
    ["synth.pareto_front", "synth.frontier", "synth.exact", "synth.cost_choice"],
    ["synth.export"],
    ["synth.output", "synth.output_folder", "synth.compare", "synth.anytime"],
    ["synth.plan", "synth.answer"],
    ["synth.run"],
    ["synth.pictures"],
    ["synth.cli", "synth.__main__"],
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> int:
    best = None
    for index, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} belongs to no stage: add it to STAGES"
    return best[0]


def synth_imports(path: Path) -> set[str]:
    """Every synth module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "synth"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "synth":
            found.add(node.module)
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_stages_import_only_from_earlier_stages(path):
    here = stage_of(module_name(path))
    later = sorted(m for m in synth_imports(path) if stage_of(m) > here)
    assert not later, f"{module_name(path)} imports from later stages: {later}"


# the verifier's package: its rooms import synth.errors and each other only
VERIFIER_ROOMS = ["synth.schedule.verify"] + [f"synth.schedule.verify.{m}" for m in
                                              ("document", "flow", "orbits", "group")]
VERIFIER = {"synth.errors", *VERIFIER_ROOMS[1:]}


def import_graph() -> dict[str, set[str]]:
    """{module: the synth modules it imports}; `from PACKAGE import MODULE` counts as
    importing MODULE."""
    names = {module_name(p) for p in MODULES}
    graph = {}
    for path in MODULES:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names
                          else node.module for a in node.names}
        here = module_name(path)
        graph[here] = {m for m in found if m in names and m != here}
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from `start` back to it, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph[node]):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


MAX_FUNCTION_LINES = 90  # "about 80"
MAX_MODULE_LINES = 500


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_every_function_and_module_fits_its_room(path):
    text = path.read_text()
    tree = ast.parse(text)
    long = [f"{f.name} ({f.end_lineno - f.lineno + 1} lines)" for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{module_name(path)}: split {', '.join(long)}"
    lines = text.count("\n")
    assert lines <= MAX_MODULE_LINES or "Long because:" in (ast.get_docstring(tree) or ""), \
        f"{module_name(path)}: {lines} lines; split it, or say why at its top"


def test_no_import_cycle():
    graph = import_graph()
    cycles = [c for c in (cycle_through(graph, m) for m in sorted(graph)) if c]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


@pytest.mark.parametrize("module, allowed", [
    *((room, VERIFIER) for room in VERIFIER_ROOMS),
    ("synth.export.sim_buffers", set()),
    ("synth.export.msccl_sim", {"synth.errors", "synth.export.msccl_run",
                                "synth.export.sim_buffers"}),
    ("synth.export.msccl_run", {"synth.errors", "synth.export.sim_buffers"}),
    ("synth.export.mscclpp_sim", {"synth.errors", "synth.export.sim_buffers",
                                  "synth.export.mscclpp_launches",
                                  "synth.export.mscclpp_ops"}),
    ("synth.export.mscclpp_ops", {"synth.export.mscclpp_launches"}),
    ("synth.export.mscclpp_launches", {"synth.errors", "synth.export.mscclpp_proxy",
                                       "synth.export.sim_buffers"}),
    ("synth.export.mscclpp_proxy", set()),
])
def test_independent_checkers_share_no_code(module, allowed):
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():  # a package
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    assert synth_imports(path) <= allowed


def test_the_command_line_loads_no_heavy_library():
    heavy = ["ortools", "z3", "scipy", "matplotlib", "torch"]
    code = ("import sys, synth.cli; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
