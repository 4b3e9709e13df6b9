"""Benchmarks: each writes JSON (machine, versions, parameters, min/median/max metrics)."""
