"""Scenario presets as YAML data (found by name at run time)."""
