"""Repairs: in-place edits to a submitted DAG and ``autofix_dag``, which falls back on the rule fixers."""
