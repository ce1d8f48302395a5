"""feddpsyn: federated DP synthetic tables with two non-colluding servers (FedDPSyn)."""

__version__ = "0.1.0"
