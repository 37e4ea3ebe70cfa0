"""synth plan: the collectives of a whole training step, planned against one topology.

    workload = load_workload(path, topo)      # reading.py: YAML, NCCL_DEBUG log, trace
    plan = make_plan(workload, topo, limits)  # make.py: per communicator and collective
                                              # its candidates, the fastest per size range
                                              # (planner.py), then each overlap tag
    texts, doc = render_plan(plan)            # output.py: runtime files and the report,
    write_files(out, texts, doc["files"])     # rendered and checked, then written whole

A workload names communicators (groups of GPUs, by shape: per box, across boxes, ...)
and, per communicator, the collectives one step issues: their sizes, how often, and
which run at the same time. Each communicator is planned on the topology as one of its
groups sees it (synth.topology.communicator.view); every group of a communicator has
the same shape, so one plan serves them all.
"""
