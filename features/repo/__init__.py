"""The Feast repo: definitions only (``feast apply`` imports every module of a repo folder)."""
