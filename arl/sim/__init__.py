"""Discrete-event simulation of a rollout fleet (Chapter 13)."""
