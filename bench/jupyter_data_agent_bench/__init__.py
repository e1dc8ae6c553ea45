"""Benchmarks of jupyter-data-agent: a distribution of its own (``bench/`` in the repository).

It imports the runtime package ``jupyter_data_agent`` freely; the runtime never imports it.
Command line: ``jupyter-data-agent-bench`` (:mod:`.cli`); the other benchmarks run as
``python -m jupyter_data_agent_bench.<module>``.
"""
