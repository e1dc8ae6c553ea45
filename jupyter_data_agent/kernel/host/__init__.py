"""Runs where a turn is driven: the Jupyter server, a benchmark, the ``%%agent`` host (see ``kernel``)."""
