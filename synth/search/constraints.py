"""A solver-neutral constraint model and its two backends, CP-SAT and Z3.

The encoder (synth.search.encoding) writes clauses and linear inequalities over boolean and
small integer variables; `solve` hands the same model to OR-Tools CP-SAT or to Z3 and
maps the answer back. Keeping one model means one encoding to get right and two
solvers to compare.

Literals are DIMACS-style: boolean variable v (1, 2, ...) is the literal v, its
negation -v. Integer variables are numbered separately from 0.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from synth.signals import interrupt_seen

SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"
BACKENDS = ("cpsat", "z3")
# A solver is told its time limit, and CP-SAT a memory bound too, but neither is checked
# everywhere (CP-SAT's presolve of a large model ran ten minutes past its limit): past
# the limit the solver is told to stop, and STOP_GRACE seconds later it is left behind
# (its thread ends when it does; the answer is "unknown").
STOP_GRACE = 1.0
BUILD_CHECK = 20_000  # constraints added to CP-SAT's model between looks at the clock
SOLVER_MB = 2048  # memory CP-SAT may add to what the process holds when it starts


@dataclass
class ConstraintModel:
    bools: int = 0
    ints: list[tuple[int, int]] = field(default_factory=list)  # (lo, hi) per variable
    clauses: list[tuple[int, ...]] = field(default_factory=list)
    # sum(coef * bool) + sum(coef * int) <= rhs
    linear: list[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...], int]] = \
        field(default_factory=list)
    hints: dict[int, bool] = field(default_factory=dict)
    trivially_unsat: bool = False  # an empty clause was added
    minimize: tuple[int, ...] = ()  # integer variables whose sum to minimise, if any

    def new_bool(self) -> int:
        self.bools += 1
        return self.bools

    def new_int(self, lo: int, hi: int) -> int:
        self.ints.append((lo, hi))
        return len(self.ints) - 1

    def clause(self, *literals: int) -> None:
        if not literals:
            self.trivially_unsat = True
        self.clauses.append(literals)

    def at_most(self, bools, rhs: int, ints=()) -> None:
        """sum(c * b for c, b in bools) + sum(c * i for c, i in ints) <= rhs."""
        self.linear.append((tuple(bools), tuple(ints), rhs))


@dataclass(frozen=True)
class Answer:
    status: str  # SAT, UNSAT or UNKNOWN (out of time)
    bools: frozenset[int] = frozenset()  # the true boolean variables
    ints: tuple[int, ...] = ()
    seconds: float = 0.0
    optimal: bool = False  # with an objective: the minimum is proven


def solve(model: ConstraintModel, backend: str = "cpsat", time_limit: float = 60.0,
          workers: int = 2, seed: int = 0) -> Answer:
    start = time.perf_counter()
    if model.trivially_unsat:
        return Answer(UNSAT, seconds=time.perf_counter() - start)
    run = {"cpsat": _solve_cpsat, "z3": _solve_z3}[backend]
    status, true_bools, ints, optimal = run(model, max(time_limit, 0.01), workers, seed)
    return Answer(status, true_bools, ints, time.perf_counter() - start, optimal)


def _solve_cpsat(model: ConstraintModel, time_limit: float, workers: int, seed: int):
    """The model as CP-SAT's own CpModelProto, built directly: OR-Tools' cp_model layer
    would import pandas and NumPy (a third of a second at every start) and make a Python
    object per variable and constraint. Boolean variable v is CP-SAT variable v - 1
    (literal v - 1, its negation -v); integer variable i follows the booleans."""
    from ortools.sat.python import cp_model_helper as cmh

    end = time.monotonic() + time_limit  # building a large model takes seconds too
    proto = cmh.CpModelProto()
    for _ in range(model.bools):
        proto.variables.add().domain.extend((0, 1))
    first_int = model.bools
    for lo, hi in model.ints:
        proto.variables.add().domain.extend((lo, hi))

    def lit(x):
        return x - 1 if x > 0 else x  # -v is CP-SAT's negation of variable v - 1

    for i, clause in enumerate(model.clauses):
        if i % BUILD_CHECK == 0 and time.monotonic() > end:
            return UNKNOWN, frozenset(), (), False
        proto.constraints.add().bool_or.literals.extend([lit(x) for x in clause])
    for i, (bool_terms, int_terms, rhs) in enumerate(model.linear):
        if i % BUILD_CHECK == 0 and time.monotonic() > end:
            return UNKNOWN, frozenset(), (), False
        linear = proto.constraints.add().linear
        variables, coefficients = [], []
        for c, v in bool_terms:  # c * (1 - b) = c - c * b for a negated literal
            if v > 0:
                variables.append(v - 1)
                coefficients.append(c)
            else:
                variables.append(-v - 1)
                coefficients.append(-c)
                rhs -= c
        variables += [first_int + i for _, i in int_terms]
        coefficients += [c for c, _ in int_terms]
        linear.vars.extend(variables)
        linear.coeffs.extend(coefficients)
        linear.domain.extend((_INT64_MIN, rhs))
    if model.hints:
        proto.solution_hint.vars.extend(v - 1 for v in model.hints)
        proto.solution_hint.values.extend(int(x) for x in model.hints.values())
    if model.minimize:
        proto.objective.vars.extend(first_int + i for i in model.minimize)
        proto.objective.coeffs.extend(1 for _ in model.minimize)
    parameters = cmh.SatParameters()
    left = max(end - time.monotonic(), 0.01)
    parameters.max_time_in_seconds = left
    parameters.max_memory_in_mb = resident_mb() + SOLVER_MB
    parameters.num_workers = workers
    parameters.random_seed = seed
    parameters.catch_sigint_signal = False  # Ctrl-C is ours: see _interruptible
    solver = cmh.SolveWrapper()
    solver.set_parameters(parameters)
    response = _interruptible(lambda: solver.solve(proto), solver.stop_search, left)
    if response is None:  # left behind: it did not stop when told
        return UNKNOWN, frozenset(), (), False
    status = response.status
    if status in (cmh.CpSolverStatus.OPTIMAL, cmh.CpSolverStatus.FEASIBLE):
        values = list(response.solution)
        true = frozenset(v + 1 for v in range(model.bools) if values[v])
        return SAT, true, tuple(values[first_int:]), status == cmh.CpSolverStatus.OPTIMAL
    if status == cmh.CpSolverStatus.INFEASIBLE:
        return UNSAT, frozenset(), (), False
    if status == cmh.CpSolverStatus.MODEL_INVALID:
        raise RuntimeError("internal error: CP-SAT found the model invalid")
    return UNKNOWN, frozenset(), (), False


_INT64_MIN = -(2 ** 63)


def _solve_z3(model: ConstraintModel, time_limit: float, workers: int, seed: int):
    import z3

    if model.minimize:  # z3's optimiser: slower, but the same answers
        s = z3.Optimize()
        s.set("timeout", int(time_limit * 1000))
    else:
        s = z3.SolverFor("QF_LIA")
        s.set("timeout", int(time_limit * 1000))
        s.set("random_seed", seed)
    # Ctrl-C is Python's (_interruptible): z3's own handler took it during a solve,
    # which then ended "unknown", read as out of time (exit 1, not 130)
    s.set("ctrl_c", False)
    b = [None] + [z3.Bool(f"b{v}") for v in range(1, model.bools + 1)]
    n = [z3.Int(f"i{i}") for i in range(len(model.ints))]

    def lit(x):
        return b[x] if x > 0 else z3.Not(b[-x])

    for i, (lo, hi) in enumerate(model.ints):
        s.add(n[i] >= lo, n[i] <= hi)
    for clause in model.clauses:
        if interrupt_seen():  # swallowed in z3's destructors: a look costs nothing here
            raise KeyboardInterrupt
        s.add(z3.Or([lit(x) for x in clause]) if len(clause) > 1 else lit(clause[0]))
    for bool_terms, int_terms, rhs in model.linear:
        if interrupt_seen():
            raise KeyboardInterrupt
        if not int_terms and all(c > 0 for c, _ in bool_terms):
            s.add(z3.PbLe([(b[v], c) for c, v in bool_terms], rhs))
        else:
            s.add(z3.Sum([z3.If(b[v], c, 0) for c, v in bool_terms]
                         + [c * n[i] for c, i in int_terms]) <= rhs)
    if model.minimize:
        s.minimize(z3.Sum([n[i] for i in model.minimize]))
    result = _interruptible(s.check, s.ctx.interrupt, time_limit)
    if result == z3.sat:  # for Optimize, sat means the optimum was reached
        m = s.model()
        true = frozenset(v for v in range(1, model.bools + 1)
                         if z3.is_true(m.eval(b[v], model_completion=True)))
        ints = tuple(m.eval(x, model_completion=True).as_long() for x in n)
        return SAT, true, ints, bool(model.minimize)
    if result == z3.unsat:
        return UNSAT, frozenset(), (), False
    return UNKNOWN, frozenset(), (), False


def _interruptible(run, stop, seconds: float):
    """run() in a worker thread, so that Ctrl-C reaches Python at once: it stops the
    solver and raises KeyboardInterrupt here, and the caller keeps what it had; so does
    a Ctrl-C seen before or meanwhile whose KeyboardInterrupt was swallowed (synth.signals),
    and then run() is not started. Past
    `seconds` the solver is told to stop (stop()), and None is returned if it has not
    within STOP_GRACE more."""
    if interrupt_seen():  # a Ctrl-C came while the model was built, swallowed there
        raise KeyboardInterrupt
    box = {}

    def target():
        try:
            box["value"] = run()
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    limit = time.monotonic() + seconds
    told = None
    try:
        while worker.is_alive():
            worker.join(0.1)
            if interrupt_seen():
                raise KeyboardInterrupt
            now = time.monotonic()
            if told is None and now > limit:
                stop()
                told = now
            elif told is not None and worker.is_alive() and now > told + STOP_GRACE:
                _LEFT_BEHIND.append(worker)
                return None
    except KeyboardInterrupt:
        stop()
        worker.join(5)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


_LEFT_BEHIND: list[threading.Thread] = []  # solver threads that did not stop when told


def left_behind() -> bool:
    """Whether a solver left behind (_interruptible) is still running."""
    return any(t.is_alive() for t in _LEFT_BEHIND)


def resident_mb() -> int:
    """The process's resident memory in MiB (Linux /proc; elsewhere 0)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE") >> 20
