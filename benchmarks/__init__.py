"""Reproducible benchmarks, each compared with a named baseline measured in the same run."""
