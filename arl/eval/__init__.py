"""Evaluation: metrics of runs and the statistics that compare them."""
