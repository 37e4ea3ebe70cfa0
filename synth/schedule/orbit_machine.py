"""A machine written once per orbit: what a version 4 file's `topology.orbits` lists.

docs/schedule-file.md, "Version 4". The group H of a schedule written once per orbit
(synth.schedule.orbits.Orbits) maps the machine onto itself, so the machine is fixed by
one member of each orbit of its links and groups: the links into the representatives
(each link orbit has exactly one, H acting freely) and one group of each group orbit,
with the names of its translates. At 512 GPUs that is a 32nd of the 261,632 rank links
and million group links that made 17.8 MB of every 20 MB file.

    listed(orbits, model)          (links, [(group, names of its translates)]) or None
    expanded(orbits, links, groups) the whole machine's links and groups again

Cost: O(links + group links) each, one pass of array lookups per translation.
"""

from __future__ import annotations

from synth.topology.linkmodel import Group, LinkModel, RankLink


def listed(orbits, model: LinkModel
           ) -> tuple[list[RankLink], list[tuple[Group, list[str]]]] | None:
    """The links of `model` into representatives, and a group of each group orbit (the
    first in model order) with the names of its translates by orbits.elements (the
    first: its own); None where this cannot say the machine exactly: a translate of a
    link is no link of the model with the same capacity and alpha, a translate of a
    group no group of the same capacity, a group is its own translate, or two groups
    hold the same links."""
    into = [l for l in model.links if orbits.split(l.dst)[1] == 0]
    if not _links_are_translates(into, model, orbits):
        return None
    named = {(frozenset(g.links), g.capacity): g.name for g in model.groups}
    if len(named) != len(model.groups):
        return None
    seen, out = set(), []
    for g in model.groups:
        if (frozenset(g.links), g.capacity) in seen:
            continue
        names = []
        for links in orbits.translates(g.links).tolist():  # one per element of H
            image = (frozenset(map(tuple, links)), g.capacity)
            if image not in named or image in seen:
                return None  # not a group, or a translate met twice: g is its own
            seen.add(image)
            names.append(named[image])
        out.append((g, names))
    return into, out


def _perms(orbits):
    """Each translation's permutation of the ranks, by orbits.elements, one at a time
    (all at once: |H| x N integers, 660 MB for a 64 x 64 torus)."""
    return (orbits.permutation(v) for v in orbits.elements)


def _links_are_translates(into: list[RankLink], model: LinkModel, orbits) -> bool:
    """Whether every translate of each link into a representative (`into`) is a link of
    the same capacity and alpha, and they are all the links."""
    if len(into) * orbits.order != len(model.links):
        return False
    link = model.link
    for perm in _perms(orbits):
        for l in into:
            image = link.get((perm[l.src], perm[l.dst]))
            if image is None or (image.capacity, image.alpha_us) != (l.capacity, l.alpha_us):
                return False
    return True


def expanded(orbits, links: list[RankLink], groups: list[tuple[Group, list[str]]]
             ) -> tuple[tuple[RankLink, ...], tuple[Group, ...]]:
    """Every translate of the listed links (in (src, dst) order) and groups (the names
    given, in the order listed); ValueError where a group's names are not one per
    translation, or two links are one."""
    for g, names in groups:
        if len(names) != orbits.order:
            raise ValueError(f"topology.orbits: group {g.name[:40]!r} names "
                             f"{len(names)} translates, not {orbits.order}")
    out, made = [], [[] for _ in groups]
    for i, p in enumerate(_perms(orbits)):
        out += [RankLink(p[l.src], p[l.dst], l.capacity, l.alpha_us) for l in links]
        for translates, (g, names) in zip(made, groups):
            translates.append(Group(names[i], tuple((p[a], p[b]) for a, b in g.links),
                                    g.capacity))
    out.sort(key=lambda l: (l.src, l.dst))
    if any(a.src == b.src and a.dst == b.dst for a, b in zip(out, out[1:])):
        raise ValueError("topology.orbits: two listed links are translates of one link")
    return tuple(out), tuple(g for translates in made for g in translates)
