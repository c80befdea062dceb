"""Shared pytest configuration (the notebook runner now lives in lnbook.notebook_runner)."""
