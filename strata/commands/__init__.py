"""The CLI's commands, one module per topic, each exposing one typer ``app``."""
