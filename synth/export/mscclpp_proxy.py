"""The host proxy of the MSCCL++ plan simulator (synth.export.mscclpp_launches runs the
ops): the FIFO of one port channel, in the order its requests reach it, and which of its
transfers are known complete (section 4.3 of the format; docs/runtimes.md, how port
channels are modelled).

put, pws and pwsf push one request per entry (thread i pushes entry i), signal one per
channel; requests pushed by different threads of a thread block since its last nop (one
epoch) may reach the FIFO in either order, so a signal covers only the requests before
the first one pushed by another thread in its epoch. A transfer is known complete at
the receiver's wait on a signal that covers it, or at the pusher's pwsf or flush that
covers it. Part of the independent checker: it imports the standard library only.
"""


class _Proxy:
    """The host proxy's FIFO of one port channel (rank, GPU-level id)."""

    def __init__(self, rank, g):
        self.rank, self.g = rank, g
        self.seq = 0
        self.entries = []  # (seq, pushing thread, pusher's epoch, transfer or None)
        self.start = 0  # first entry of the pusher's current epoch
        self.acked = 0  # entries up to this seq are covered by a signal the peer waited on
        self.next = {"wait": 0, "flush": 0}  # first entry not yet completed by that kind

    def covered(self, thread, epoch):
        """The last seq a request pushed now by `thread` is certainly behind: requests
        since the pusher's last nop from other threads may come after it."""
        if self.start < len(self.entries) and self.entries[self.start][2] != epoch:
            self.start = len(self.entries)
        last = self.entries[self.start - 1][0] if self.start else 0
        for seq, who, _, _ in self.entries[self.start:]:
            if who != thread:
                break
            last = seq
        return last

    def push(self, thread, epoch, transfer=None):
        if self.start < len(self.entries) and self.entries[self.start][2] != epoch:
            self.start = len(self.entries)
        self.seq += 1
        self.entries.append((self.seq, thread, epoch, transfer))
        return self.seq

    def complete(self, upto, event, kind):
        """The transfers up to seq `upto` known complete at event (gid, seq): the
        receiver's wait, or the pusher's pwsf or flush. Each kind of event comes from one
        thread block, so the first that covers a transfer is the one to know."""
        i, done = self.next[kind], []
        while i < len(self.entries) and self.entries[i][0] <= upto:
            if self.entries[i][3] is not None:
                self.entries[i][3]["done"].append(event)
                done.append(self.entries[i][3])
            i += 1
        self.next[kind] = i
        return done
