"""pdag's deterministic core: the functions the MCP tools, the CLI and the evals call."""

from tools.autofix import autofix_dag
from tools.build import build_dag, build_dag_page
from tools.engines import export_plan, import_command, import_deployment
from tools.estimate import estimate_performance
from tools.lookup import lookup_rule
from tools.search import search_strategies
from tools.validate import validate_dag

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
