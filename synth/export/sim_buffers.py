"""What each collective's buffers hold at the start of a call and must hold at its end,
slot by slot: the table both runtime simulators (synth.export.msccl_sim,
synth.export.mscclpp_sim) check a file against. NCCL's layout, the same for both
runtimes. Part of the independent checker: it imports the standard library only.

Data is symbolic: a slot holds a sorted tuple of (rank, chunk) contributions (a
reduction concatenates them, so a double count shows). C is the chunks per share, N the
ranks:

    collective      rank r starts with (out of place / in place)  rank r ends with
    allgather       i[j] / o[r*C+j] = chunk r*C+j                  o[k] = chunk k
    reducescatter   i[k] = r's share of chunk k                    o[j] / i[r*C+j] = sum
    allreduce       i[k] / o[k]                                    o[k] = sum
    broadcast       root: i[k] / o[k]                              o[k] = root's chunk k
    reduce          i[k] / o[k]                                    root: o[k] = sum
    gather          i[j] / o[r*C+j] = chunk r*C+j                  root: o[k] = chunk k
    scatter         root: i[k] = chunk k                           o[j] / i[r*C+j] = chunk r*C+j
    alltoall        i[d*C+j] = chunk (r*N+d)*C+j                   o[s*C+j] = chunk (s*N+r)*C+j
"""

COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter", "alltoall")
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})


def layout(coll, n, c, root, inplace):
    """(i_chunks, o_chunks, start, end): start/end map (rank, buf, idx) to a value."""
    def one(rank, chunk):
        return ((rank, chunk),)

    def total(chunk):
        return tuple((q, chunk) for q in range(n))

    start, end = {}, {}
    if coll in ("allgather", "gather"):
        sizes = (0 if inplace else c, n * c)
        for r in range(n):
            for j in range(c):
                start[(r, "o", r * c + j) if inplace else (r, "i", j)] = one(r, r * c + j)
        for r in range(n) if coll == "allgather" else [root]:
            for k in range(n * c):
                end[(r, "o", k)] = one(k // c, k)
    elif coll == "broadcast":
        sizes = (0 if inplace else c, c)
        for k in range(c):
            start[(root, "o" if inplace else "i", k)] = one(root, k)
            for r in range(n):
                end[(r, "o", k)] = one(root, k)
    elif coll in ("allreduce", "reduce"):
        sizes = (0 if inplace else c, c)
        for k in range(c):
            for r in range(n):
                start[(r, "o" if inplace else "i", k)] = one(r, k)
            for r in range(n) if coll == "allreduce" else [root]:
                end[(r, "o", k)] = total(k)
    elif coll in ("reducescatter", "scatter"):
        sizes = (n * c, 0 if inplace else c)
        for k in range(n * c):
            if coll == "reducescatter":
                for r in range(n):
                    start[(r, "i", k)] = one(r, k)
            else:
                start[(root, "i", k)] = one(root, k)
            want = total(k) if coll == "reducescatter" else one(root, k)
            end[(k // c, "i", k) if inplace else (k // c, "o", k % c)] = want
    else:  # alltoall
        sizes = (n * c, n * c)
        for s in range(n):
            for d in range(n):
                for j in range(c):
                    k = (s * n + d) * c + j
                    start[(s, "i", d * c + j)] = one(s, k)
                    end[(d, "o", s * c + j)] = one(s, k)
    return sizes[0], sizes[1], start, end

