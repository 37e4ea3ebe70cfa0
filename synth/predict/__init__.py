"""Predictions of what hardware does (cost model version 2, docs/cost-model.md).

- (synth.topology.figures: the constants a prediction uses, with their public sources,
  and the `costs:` section of a topology file that overrides them;)
- machine: a topology as NCCL sees it (architecture, GPUs per node, rates);
- nccl: NCCL's algorithms and its tuner's choice per size (NCCL 2.30.7), and the
  predicted time of that choice: the reference wherever synth says "NCCL";
- timing: the predicted time of one of synth's schedules;
- nccl_tests and calibrate: read nccl-tests output and fit the figures to it.

The line-rate model (synth.schedule.cost) stays for bounds and proofs.
"""
