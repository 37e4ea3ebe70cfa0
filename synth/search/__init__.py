"""Schedules found by a solver: an instance as constraints (encoding), the
solver-neutral model and its CP-SAT and Z3 backends (constraints), one instance solved,
decoded and verified (instance), remembered answers (cache), and the Pareto search over
steps, rounds and chunks (pareto)."""
