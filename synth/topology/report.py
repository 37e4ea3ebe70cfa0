"""What `synth topo show` prints: a topology, its lowering, and derived figures."""

from __future__ import annotations

from collections import Counter

from synth.deadline import Deadline, in_time
from synth.topology.degrade import changes
from synth.topology.fabric import describe, tiers_of
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import diameter, lower_with_routes
from synth.topology.physical import GPU, NIC, Topology
from synth.topology.several_routes import routes_lines, routes_summary


def topology_summary(topo: Topology, deadline: Deadline = Deadline()) -> dict:
    """What `synth topo show` prints; TimeLimit past the deadline (routing, listing
    the routes, rank links and groups, the diameter; finding the boxes says it ran out
    of time instead)."""
    lowering = lower_with_routes(topo, deadline)
    model = lowering.model
    # the lists below take a second on 1024 GPUs: each looks at the deadline as it goes
    doing = f"describing {topo.name} ({model.ranks} GPUs)"
    gpus = topo.gpus
    out_gbps, in_gbps = Counter(), Counter()
    for link in topo.links:
        out_gbps[link.src] += link.bandwidth
        in_gbps[link.dst] += link.bandwidth
    nic_users: dict[str, set[int]] = {v.name: set() for v in topo.vertices if v.kind == NIC}
    for (src, _), path in in_time(lowering.routes.items(), deadline, doing):
        # the first NIC on a route is the one its GPU sends into the network through
        first = next((v for v in path if v in nic_users), None)
        if first is not None:
            nic_users[first].add(src)
    hierarchy, why = find_hierarchy(lowering, deadline=deadline)
    return {
        "name": topo.name,
        "description": topo.description,
        "unit_gbps": topo.unit_gbps,
        "boxes": topo.boxes,
        "ranks": len(gpus),
        "gpus": gpus,
        "switches": [{"name": v.name, "kind": v.kind, "box": v.box}
                     for v in topo.vertices if v.kind not in (GPU, NIC)],
        "nics": [{"name": name, "box": topo.vertex(name).box, "gpus": sorted(users)}
                 for name, users in nic_users.items()],
        "links": [{"src": l.src, "dst": l.dst, "gbps": l.gbps, "count": l.count,
                   "alpha_us": l.alpha_us} for l in topo.links],
        "rank_links": [[l.src, l.dst, float(l.capacity), l.alpha_us]
                       for l in in_time(model.links, deadline, doing)],
        "groups": [{"name": g.name, "capacity": float(g.capacity),
                    "links": [list(p) for p in g.links],
                    "physical": list(lowering.group_sources[g.name])}
                   for g in in_time(model.groups, deadline, doing, 64)],
        "per_gpu": [{"rank": r, "name": name, "out_gbps": out_gbps[name],
                     "in_gbps": in_gbps[name]} for r, name in enumerate(gpus)],
        "diameter": diameter(model, deadline),
        "network": _network(topo),
        "source": topo.source,
        "assumptions": list(topo.assumptions),
        **routes_summary(topo, model),
        # a degraded machine (synth.topology.degrade): the healthy one and the edits
        **({"degraded": {"healthy": topo.healthy.name, "edits": list(topo.edits),
                         "changes": changes(topo)}} if topo.healthy is not None else {}),
        "inferred": ([{"vertex": v.name, "why": v.inferred} for v in topo.vertices
                      if v.inferred]
                     + [{"link": [l.src, l.dst], "why": l.inferred} for l in topo.links
                        if l.inferred and l.src < l.dst]),
        "hierarchy": ({"boxes": [list(b) for b in hierarchy.boxes],
                       "peer_groups": [list(p) for p in hierarchy.peers],
                       "rails": {name: list(ix) for name, ix in hierarchy.rails},
                       "gpus_per_nic": hierarchy.gpus_per_nic,
                       "gateways": list(hierarchy.gateways),
                       "via_gateway": [list(p) for p in hierarchy.to_proxy],
                       "summary": hierarchy.describe()}
                      if hierarchy else {"none": why}),
    }


def _network(topo: Topology) -> dict | None:
    """How the boxes are joined (synth.topology.fabric): the fabric, its options and
    its tiers of switches; None for one box."""
    net = topo.network
    if net is None or topo.boxes < 2:
        return None
    nics = sum(1 for v in topo.vertices if v.kind == NIC) // topo.boxes
    return {"fabric": net.fabric, "gbps": net.gbps, "tiers": net.tiers,
            "leaf": net.leaf_boxes if net.tiers > 1 else None, "pod": net.pod or None,
            "over": net.over, "summary": describe(net, topo.boxes, nics),
            "switch_tiers": tiers_of(topo)}


INFERRED_SHOWN = 12  # lines of inferred parts in the text summary


def format_summary(s: dict) -> str:
    kinds = Counter(sw["kind"] for sw in s["switches"])
    switches = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
    lines = [
        f"{s['name']}: {s['description']}".rstrip(": "),
        f"  GPUs {s['ranks']}  NICs {len(s['nics'])}  switches {switches}  boxes {s['boxes']}",
        f"  physical links {len(s['links'])} (directed)  rank links {len(s['rank_links'])}"
        f"  shared groups {len(s['groups'])}  hop diameter {s['diameter']}",
        f"  capacity unit {s['unit_gbps']:g} GB/s",
    ]
    if s["nics"] and not any(n["gpus"] for n in s["nics"]):
        lines.append("  NICs: no GPU sends through one (they join no network here)")
    elif s["nics"]:
        per = Counter(len(n["gpus"]) for n in s["nics"])
        lines.append("  NICs shared by: " + ", ".join(
            f"{k} GPU{'s' if k != 1 else ''} ({v} NICs)" for k, v in sorted(per.items())))
    if s["source"]:
        lines.append(f"  imported from {s['source']}: {len(s['inferred'])} parts inferred, "
                     "the rest read")
        lines += [f"    inferred: {'-'.join(x['link']) if 'link' in x else x['vertex']}: "
                  f"{x['why']}" for x in s["inferred"][:INFERRED_SHOWN]]
        if len(s["inferred"]) > INFERRED_SHOWN:
            lines.append(f"    ... and {len(s['inferred']) - INFERRED_SHOWN} more (--json)")
        lines += [f"    assumed: {a}" for a in s["assumptions"]]
    if s.get("network"):
        lines.append(f"  network: {s['network']['summary']}")
        for t in s["network"]["switch_tiers"]:
            line = (f"    tier {t['tier']}: {t['switches']} switch"
                    f"{'es' if t['switches'] > 1 else ''} ({', '.join(t['examples'])}"
                    f"{', ...' if t['switches'] > len(t['examples']) else ''})")
            if "uplink_gbps" in t:
                line += (f", each up at {t['uplink_gbps']:g} GB/s for {t['below_gbps']:g} "
                         f"GB/s below it ({t['oversubscription']:g}:1)")
            lines.append(line)
    lines += [f"  {line}" for line in routes_lines(s)]
    h = s["hierarchy"]
    lines.append(f"  decomposition: {h['summary']}" if "summary" in h
                 else f"  decomposition: none ({h['none']})")
    bandwidths = Counter((g["out_gbps"], g["in_gbps"]) for g in s["per_gpu"])
    if len(bandwidths) == 1:
        (out, inn), = bandwidths
        lines.append(f"  per GPU: out {out:g} GB/s, in {inn:g} GB/s (every GPU; its links of "
                     "every kind, PCIe to a NIC too)")
    else:
        lines.append("  rank  GPU           out GB/s   in GB/s")
        for g in s["per_gpu"]:
            lines.append(f"  {g['rank']:>4}  {g['name']:<12} {g['out_gbps']:>9g} {g['in_gbps']:>9g}")
    return "\n".join(lines)
