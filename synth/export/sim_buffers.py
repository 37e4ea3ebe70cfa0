"""What each collective's buffers hold at the start of a call and must hold at its end,
slot by slot: the table both runtime simulators (synth.export.msccl_sim,
synth.export.mscclpp_sim) check a file against. NCCL's layout, the same for both
runtimes. Part of the independent checker: it imports the standard library only.

Data is symbolic: a slot holds the (rank, chunk) contributions it sums, as a sorted
tuple of (chunk, mask of ranks) pairs: a sum of N ranks' chunk is one pair, not N pairs
(at 128 ranks those took 0.6 of a plan check's 1 GB). A sum that would count a
contribution twice is a Twice, which no result equals and no later sum undoes (sums
only add). C is the chunks per share, N the ranks:

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


class Twice:
    """A sum that counts the contribution (rank, chunk) more than once; `held`, the
    contributions it had when that happened (for the message: which are missing)."""
    __slots__ = ("rank", "chunk", "held")

    def __init__(self, rank, chunk, held):
        self.rank, self.chunk, self.held = rank, chunk, held


def combine(a, b):
    """The sum of two values (a reduction's result)."""
    if isinstance(a, Twice):
        return a
    if isinstance(b, Twice):
        return b
    if len(a) == 1 and len(b) == 1 and a[0][0] == b[0][0]:  # the common case: one chunk
        (chunk, x), (_, y) = a[0], b[0]
        union, twice = ((chunk, x | y),), (x & y, chunk)
    else:
        merged, twice = dict(a), (0, None)
        for chunk, mask in b:
            held = merged.get(chunk, 0)
            if held & mask and not twice[0]:
                twice = (held & mask, chunk)
            merged[chunk] = held | mask
        union = tuple(sorted(merged.items()))
    common, chunk = twice
    if not common:
        return union
    return Twice((common & -common).bit_length() - 1, chunk, union)


def clock_type(most: int) -> str:
    """The narrowest unsigned integer type (numpy's name) that holds every count up to
    `most`: both simulators' vector clocks count steps or ops, and have an entry per
    thread block of the file, so their width is most of their memory."""
    for bits in (8, 16, 32):
        if most < 2 ** bits:
            return f"uint{bits}"
    return "int64"


def show(value):
    """A value as a line says it: {rank:chunk, ...}."""
    if value is None:
        return "nothing"
    if isinstance(value, Twice):
        return f"a sum counting {value.rank}:{value.chunk} twice, of {show(value.held)}"
    pairs = sorted((r, chunk) for chunk, mask in value for r in range(mask.bit_length())
                   if mask >> r & 1)
    return "{" + ", ".join(f"{r}:{k}" for r, k in pairs) + "}"


def layout(coll, n, c, root, inplace):
    """(i_chunks, o_chunks, start, end): start/end map (rank, buf, idx) to a value."""
    def one(rank, chunk):
        return ((chunk, 1 << rank),)

    def total(chunk):
        return ((chunk, (1 << n) - 1),)

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

