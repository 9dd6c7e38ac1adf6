"""Reward design; import from the modules: this package imports nothing (no pandas for a rubric's server)."""
