"""DWD, the clean facts: typed, deduplicated, pseudonymized, priced and labelled rows."""
