"""The utility benchmark harness (issue: bench utility): partitions of a table over clients,
metrics against the real union, and the federated methods compared."""
