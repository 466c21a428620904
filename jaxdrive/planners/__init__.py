"""Reference planners (NAVSIM's PDM-Closed)."""
