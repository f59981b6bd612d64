"""pdag's deterministic core: the functions the MCP tools, the CLI and the evals call."""

from tools.core.build import build_dag, build_dag_page
from tools.engines.launch import export_plan, import_command, import_deployment
from tools.estimate import estimate_performance
from tools.repair.autofix import autofix_dag
from tools.rules.lookup import lookup_rule
from tools.rules.validate import validate_dag
from tools.search.strategies import search_strategies

__all__ = [
    "autofix_dag",
    "build_dag",
    "build_dag_page",
    "estimate_performance",
    "export_plan",
    "import_command",
    "import_deployment",
    "lookup_rule",
    "search_strategies",
    "validate_dag",
]
