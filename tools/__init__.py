"""pdag's deterministic core: the functions the MCP tools, the CLI and the evals call."""

from tools.build import build_dag

__all__ = ["build_dag"]
