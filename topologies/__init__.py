"""Topology presets and the hardware catalog, as YAML data (found by name at run time)."""
