"""Pictures: graphviz rendering shared by the drawings (graphviz), the topology
(topology) and a schedule step by step (schedule), matplotlib plots of a frontier
(plots), and the offline HTML report (report)."""
