"""The JSON API under /v0/: agent.py (holds, runs, files), evals.py (datasets, experiments), and
common.py, what they share."""
