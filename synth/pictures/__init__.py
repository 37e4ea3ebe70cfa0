"""Pictures: graphviz rendering shared by the drawings (graphviz), the topology
(topology), a schedule step by step (schedule; its dense steps as matrices: matrix; the
labels of what a step carries: loads; a pipeline's timeline: timeline), matplotlib plots
of a frontier (plots), and the offline HTML report (report)."""
