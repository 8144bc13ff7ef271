"""The test-only ``toy-copy`` family (registered on import; TABLEGEN_PLUGINS=toy_family.model)."""
