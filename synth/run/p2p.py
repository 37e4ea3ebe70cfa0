"""A rank's plan (synth.run.rank_plan) as torch.distributed point-to-point messages.

`Program(plan, elems, dtype, device, group)` allocates the rank's work buffers once,
for chunks of `elems` elements; `program.run(inp)` runs the schedule once on the input
buffer `inp` and returns the output buffer (a view of the work buffer, which the next
run overwrites). Each step's sends and receives are posted together
(batch_isend_irecv) and applied when all have arrived, so every send reads the value
its rank held at the start of the step, as the schedule's semantics say. Ranks are the
group's ranks (`group_peer`), so a schedule runs on any process group of its size.
"""

from __future__ import annotations

from synth.run.rank_plan import RankPlan, merged, minus


def poison(torch, dtype):
    """What a slot holds before its value arrives: NaN for floating types, so that a
    wrong schedule that reads a chunk its rank never received shows in the numbers; for
    integers the largest value, which the checks' small data never reaches."""
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max


class Program:
    """One rank's plan on torch tensors (module docstring)."""

    def __init__(self, plan: RankPlan, elems: int, dtype, device, group=None):
        import torch
        import torch.distributed as dist

        self.plan, self.elems = plan, elems
        work = torch.full((plan.work_chunks * elems,), poison(torch, dtype), dtype=dtype,
                          device=device)
        temp = torch.empty(plan.temp_chunks * elems, dtype=dtype, device=device)
        # output slots the rank has no result in: 0
        results = merged((s, s + b - a) for a, b, s in plan.out_segments)
        for lo, hi in minus([(0, plan.out_chunks)], results):
            work[lo * elems:hi * elems].zero_()

        def view(buf, slot, n):
            return buf[slot * elems:(slot + n) * elems]

        self._loads = [(view(work, w, n), i * elems, (i + n) * elems) for w, i, n in plan.load]
        self._program = []
        for step in plan.steps:
            # receives first: a message whose receive is posted lands in place, one
            # that arrives before it is buffered by gloo and copied again
            ops = [dist.P2POp(dist.irecv, view(temp if into_temp else work, s, n),
                              group=group, group_peer=peer, tag=tag)
                   for peer, s, n, tag, into_temp in step.recvs]
            ops += [dist.P2POp(dist.isend, view(work, s, n), group=group, group_peer=peer,
                               tag=tag) for peer, s, n, tag in step.sends]
            applies = [(op == "reduce", view(work, d, n), view(temp, t, n))
                       for op, d, n, t in step.applies]
            self._program.append((ops, applies))
        self._out = work[:plan.out_chunks * elems]

    def run(self, inp):
        """One run on `inp` (the rank's input buffer, flat); the output buffer."""
        import torch.distributed as dist

        for target, lo, hi in self._loads:
            target.copy_(inp[lo:hi])
        for ops, applies in self._program:
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            for add, target, source in applies:  # after the step: sends read start values
                if add:
                    target.add_(source)
                else:
                    target.copy_(source)
        return self._out
