"""MCP resources: the knowledge base, rule catalog, presets and schemas under stable `pdag://` URIs.

Resources let a client (or a user in Claude Desktop) attach reference material without a tool call; every
one is generated from the same data files and pydantic models the core uses, so they cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

import knowledge
import prompts
from tools.core.dag import dag_json_schema
from tools.core.errors import PdagInputError
from tools.core.hardware import accelerator_ids, load_accelerator
from tools.core.models import load_preset, preset_index
from tools.rules.lookup import catalog, lookup_rule
from tools.schemas import plan_json_schema

JSON = "application/json"
MARKDOWN = "text/markdown"


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False)


def knowledge_docs() -> dict[str, Path]:
    """Knowledge documents by their path under knowledge/ (markdown only; data files have their own URIs)."""
    return {p.relative_to(knowledge.ROOT).as_posix(): p for p in sorted(knowledge.ROOT.rglob("*.md"))}


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return path.stem.replace("_", " ")


def _reader(path: Path) -> Callable[[], str]:
    def read() -> str:
        return path.read_text(encoding="utf-8")

    return read


@contextmanager
def _not_found() -> Iterator[None]:
    """An unknown id in a resource URI -> ResourceNotFoundError (-32602) with the closest ids, not a crash."""
    try:
        yield
    except PdagInputError as exc:
        raise ResourceNotFoundError(f"{exc.problem}; allowed: {exc.allowed}") from None


def register_resources(server: MCPServer) -> None:
    docs = knowledge_docs()

    @server.resource("pdag://knowledge", name="knowledge-index", title="Knowledge base index", mime_type=JSON)
    def knowledge_index() -> str:
        """The knowledge documents (parallelism semantics, phases, scheduling, hardware) with their URIs."""
        return _json([{"uri": f"pdag://knowledge/{k}", "title": _title(p)} for k, p in docs.items()])

    for key, path in docs.items():
        # Static entries so clients can list and attach each document; the template below serves the same URIs.
        server.resource(f"pdag://knowledge/{key}", name=key.removesuffix(".md"), title=_title(path),
                        mime_type=MARKDOWN, description="")(_reader(path))

    @server.resource("pdag://knowledge/{+path}", name="knowledge-doc", title="Knowledge document",
                     mime_type=MARKDOWN)
    def knowledge_doc(path: str) -> str:
        """One knowledge document by its path, e.g. 04_parallel_primitives/tensor_parallelism.md."""
        found = docs.get(path)
        if found is None:
            raise ResourceNotFoundError(f"no knowledge document {path!r}; see pdag://knowledge for the list")
        return found.read_text(encoding="utf-8")

    @server.resource("pdag://rules/catalog", name="rule-catalog", title="Rule catalog", mime_type=JSON)
    def rule_catalog() -> str:
        """Every rule (hard rules and default assumptions) and the seed conflicts pdag resolved."""
        return _json(catalog())

    @server.resource("pdag://rules/{rule_id}", name="rule", title="One rule", mime_type=JSON)
    def rule(rule_id: str) -> str:
        """One rule (or seed conflict) by id, e.g. pdag://rules/TP-HEADS-DIVISIBLE."""
        with _not_found():
            found = lookup_rule(rule_id=rule_id)
        item = found.rules[0] if found.rules else found.conflicts[0]
        return _json(item.model_dump(mode="json", exclude_none=True))

    @server.resource("pdag://models", name="models", title="Model presets", mime_type=JSON)
    def models() -> str:
        """Model preset ids usable as plan.model, with their Hugging Face repo and parameter counts."""
        return _json([{"id": k, "uri": f"pdag://models/{k}", **{f: v.get(f) for f in
                       ("hf_repo", "published_params", "published_active_params")}}
                      for k, v in preset_index().items()])

    @server.resource("pdag://models/{model_id}", name="model", title="One model preset", mime_type=JSON)
    def model(model_id: str) -> str:
        """A model preset normalised: layers, heads, KV heads or MLA, experts, parameter counts."""
        with _not_found():
            spec = load_preset(model_id)
        return _json(spec.model_dump(mode="json"))

    @server.resource("pdag://hardware", name="hardware", title="Accelerator presets", mime_type=JSON)
    def hardware() -> str:
        """Accelerator preset ids usable as hardware.gpu, with memory and interconnect in brief."""
        out = []
        for gid in accelerator_ids():
            a = load_accelerator(gid)
            out.append({"id": gid, "uri": f"pdag://hardware/{gid}", "name": a.name, "memory_bytes": a.memory_bytes,
                        "memory": a.memory_label(), "capacity_bytes": a.capacity_bytes})
        return _json(out)

    @server.resource("pdag://hardware/{gpu_id}", name="accelerator", title="One accelerator preset", mime_type=JSON)
    def accelerator(gpu_id: str) -> str:
        """An accelerator: memory, bandwidth, dense TFLOPS per dtype, intra/inter-node links, sources."""
        with _not_found():
            acc = load_accelerator(gpu_id)
        return _json(acc.model_dump(mode="json"))

    @server.resource("pdag://tools/{tool}", name="tool", title="Tool guide", mime_type=MARKDOWN)
    def tool_guide(tool: str) -> str:
        """A tool in detail, e.g. pdag://tools/build_dag."""
        guides = prompts.tool_guides()
        if tool not in guides:
            raise ResourceNotFoundError(f"no guide for tool {tool!r}; guides: {', '.join(guides)}")
        return guides[tool]

    @server.resource("pdag://schema/dag", name="dag-schema", title="DAG JSON Schema", mime_type=JSON)
    def dag_schema() -> str:
        """JSON Schema of the node-link DAG document build_dag returns and validate_dag accepts."""
        return _json(dag_json_schema())

    @server.resource("pdag://schema/plan", name="plan-schema", title="Plan JSON Schema", mime_type=JSON)
    def plan_schema() -> str:
        """JSON Schema of the plan every tool takes."""
        return _json(plan_json_schema())
