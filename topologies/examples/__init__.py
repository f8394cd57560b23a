"""Example topology files: forms beyond the presets (explicit graphs, mixed servers)."""
