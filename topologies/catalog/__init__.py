"""Hardware catalog YAML."""
