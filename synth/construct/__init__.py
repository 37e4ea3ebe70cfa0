"""Schedules built rather than searched: moves and the ways to combine them (moves), the
NCCL-style baselines (baselines/), and multi-node synthesis by decomposition into levels
that are searched exactly and then composed and pipelined (decompose, hints)."""
