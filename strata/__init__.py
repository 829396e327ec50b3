"""Strata: the CLI and configuration of the Strata data layer."""

__version__ = "0.1.0"
