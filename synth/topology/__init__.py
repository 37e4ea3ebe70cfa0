"""What the cluster is: the physical model and its files (physical), the names users
type (catalog), the lowering to ranks, rank links and shared groups that everything
after it reads (linkmodel), the boxes of a multi-node machine (hierarchy), and the
summary `synth topo show` prints (report)."""
