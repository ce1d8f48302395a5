"""The utility benchmark harness: partitions of a table over clients, metrics against the
real union, and the federated methods compared."""
