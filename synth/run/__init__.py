"""Running a schedule on real processes: torch.distributed execution, checked against
torch's own collective and timed (distributed)."""
