"""The memory of the runtimes' answers (synth.export.loads): per schedule object, per
runtime form, and per pipeline's batch program, so that asking again costs nothing. A
schedule's entries go with it (weak references: ids are reused); the forms' tables keep
the newest FORMS.
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict

FORMS = 64  # runtime forms whose answer is kept
by_schedule: dict = {}  # (id, fmt, inplace) -> (weakref to the schedule, answer)
by_form: OrderedDict = OrderedDict()  # (fmt, inplace, form key) -> answer
# id -> (weakref, batch form key): the last FORMS asked, each gone with its schedule
batch_forms: OrderedDict = OrderedDict()


def forget() -> None:
    """Drop every remembered answer."""
    by_schedule.clear()
    by_form.clear()
    batch_forms.clear()


def answer(schedule, fmt, inplace):
    """The remembered answer for this schedule object: None (not asked), True (loads) or
    the BadInput it was refused with."""
    entry = by_schedule.get((id(schedule), fmt, inplace))
    if entry is None or entry[0]() is not schedule:
        return None
    return entry[1]


def remember(schedule, fmt, inplace, error, key=None, batch=None):
    """Keep what the exporter said (error None: it loads) for the schedule object, and
    for its runtime form (`key`) and batch program (`batch`) where given."""
    # a refusal is kept as a copy without its traceback: the one raised held its frames
    # alive with the program being built (40-50 MB each on dgx2x2's tree pipelines)
    value = True if error is None else copy.copy(error)
    _weakly(by_schedule, (id(schedule), fmt, inplace), schedule, value)
    for k in (key, batch):
        if k is not None:
            by_form[k] = value
            newest(by_form, k, FORMS)


def _weakly(table: dict, key, obj, value) -> bool:
    """table[key] = (a weak reference to obj, value), the entry gone with obj (only its
    own: ids are reused); False where obj cannot be weakly referred to (not kept)."""
    def gone(ref, k=key, t=table):
        if t.get(k, (None,))[0] is ref:
            del t[k]

    try:
        table[key] = (weakref.ref(obj, gone), value)
    except TypeError:
        return False
    return True


def newest(table: OrderedDict, key, most: int) -> None:
    """table's entry `key` made its newest, the oldest dropped past `most` entries."""
    table.move_to_end(key)
    while len(table) > most:
        table.popitem(last=False)


def batch_key(schedule, fmt, inplace):
    """A key for a pipeline's answer without its runtime form: its batch program
    (transform.one_batch, the same for every depth of one construction's pipelines),
    which the runtime form is made from alone; None where there is none."""
    if schedule.pipeline is None or (fmt == "msccl-xml" and schedule.in_network):
        return None
    form = batch_form(schedule)
    return None if form is None else (fmt, inplace, "batch", form)


def batch_form(schedule):
    """form_key of the schedule's batch program, made once per schedule: one_batch
    unfolds a folded schedule, and asking each runtime of each candidate again took
    26 s of a 6 s compare on dgxh100x8."""
    from synth.schedule.transform import one_batch

    if batch_made(schedule):
        batch_forms.move_to_end(id(schedule))
        return batch_forms[id(schedule)][1]
    batch = one_batch(schedule)
    form = None if batch is None else form_key(batch)
    if _weakly(batch_forms, id(schedule), schedule, form):  # else made again when asked
        newest(batch_forms, id(schedule), FORMS)
    return form


def batch_made(schedule) -> bool:
    """Whether batch_form has the schedule's batch program already (asking again costs
    nothing)."""
    known = batch_forms.get(id(schedule))
    return known is not None and known[0]() is schedule


def form_key(form):
    """What an exporter's program depends on: the collective, the link model (its
    boxes: memory or port channels) and the steps; the model by identity (one run
    shares one), kept alive by the key."""
    coll = form.collective
    return (coll.name, coll.ranks, coll.chunks, coll.root, _Same(form.model), form.steps)


class _Same:
    """A key part equal only to itself (a link model is compared by identity)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj


def remembered_loads(schedule, formats) -> dict[str, str | None] | None:
    """What each of `formats` said of `schedule` out of place, where each was asked
    since the table's asking (the --size answer asks on after it ran out of time), as
    Point.loads holds it; None where one was not."""
    said = {fmt: answer(schedule, fmt, False) for fmt in formats}
    if any(v is None for v in said.values()):
        return None
    return {fmt: None if v is True else str(v) for fmt, v in said.items()}
