"""Reading landed files: formats, adapters and declarative mappings onto the canonical fields."""
