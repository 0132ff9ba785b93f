"""Evaluation beyond one level: the generalisation suite, result tables, probes and episode rendering."""
