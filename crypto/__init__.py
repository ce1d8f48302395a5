"""Cryptographic and DP primitives shared by the servers and the client agent."""
