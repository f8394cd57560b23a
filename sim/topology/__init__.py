"""Network topologies and their routes."""
