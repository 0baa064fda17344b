"""Experiments: sweeps and probes over data sets."""
