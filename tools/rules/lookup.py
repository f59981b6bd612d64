"""lookup_rule: find rules of the catalog by id, by free text or by topic.

Agents cite rule ids from violations and need the rule's text, rationale and examples to act on them; people
ask in words ("why can't TP span nodes?").  Ranking is a small, deterministic BM25 so the same question always
gets the same answer, with no model or index to download.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, Field

import knowledge
from tools.core.errors import MAX_MATCHED, PdagInputError, closest, shown

__all__ = ["Conflict", "LookupResult", "Rule", "lookup_rule", "rule_ids", "catalog"]

STRATEGIES = ("DP", "PP", "TP", "EP", "SP")
PHASES = ("prefill", "decode", "both")
LEVELS = ("request", "structural", "operator", "plan", "graph")
MAX_LIMIT = 100
MAX_QUERY = 500

# Query words that stand for a strategy (so "tensor parallel" finds TP rules whose text says "TP").
_ALIASES = {
    "tensor": "tp",
    "pipeline": "pp",
    "expert": "ep",
    "experts": "ep",
    "moe": "ep",
    "sequence": "sp",
    "context": "sp",
    "data": "dp",
    "replica": "dp",
    "replicas": "dp",
}
_STOP = frozenset(
    re.split(
        r"\s+",
        "a an and are as at be by can do does for from how i in inside into is it its may must no not of on or "
        "per should that the their then there these this to use used what when where which why with without "
        "across over between span spanning within",
    )
)


class RuleScope(BaseModel):
    level: str = Field(description="request, structural, operator, plan or graph: where in the DAG the rule applies")
    phase: str = Field(description="prefill, decode or both")


class RuleSource(BaseModel):
    seed: str = Field(description="seed document the rule comes from ('pdag' for the project's own decisions)")
    section: str


class RuleExamples(BaseModel):
    violating: str = Field(description="a plan or DAG fragment that breaks the rule")
    satisfying: str = Field(description="one that satisfies it")


class Rule(BaseModel):
    """One catalog rule, complete."""

    id: str
    title: str
    statement: str = Field(description="the rule itself")
    rationale: str = Field(description="why it holds")
    scope: RuleScope
    strategies: list[str]
    node_types: list[str]
    severity: Literal["error", "warning"]
    kind: str = Field(description="hard_rule or default_assumption")
    source: list[RuleSource]
    checker: str | None = Field(description="the validator check that enforces it (null: not checked yet)")
    fixer: str | None = Field(description="the autofix that repairs it (null: no automatic fix)")
    examples: RuleExamples
    related: list[str]
    decision: str | None = Field(None, description="how pdag settled a disagreement between seeds")
    score: float | None = Field(None, description="relevance to the query (higher is better); only for queries")


class ConflictPosition(BaseModel):
    seed: str
    section: str
    says: str


class Conflict(BaseModel):
    """A point where the seed documents disagree, and what pdag decided."""

    id: str
    topic: str
    positions: list[ConflictPosition]
    pdag_decision: str | None = None
    model_config = {"extra": "allow"}


class LookupResult(BaseModel):
    """lookup_rule's answer."""

    rules: list[Rule]
    total_matches: int = Field(description="rules that matched before `limit` cut the list")
    conflicts: list[Conflict] = Field(default_factory=list, description="seed conflicts asked for by id")


@cache
def catalog() -> dict[str, Any]:
    """The parsed rule catalog (shared, read-only)."""
    return knowledge.load_json("rules/catalog.json")


def rule_ids() -> list[str]:
    return [r["id"] for r in catalog()["rules"]]


def _stem(word: str) -> str:
    """Crude suffix folding ("experts" ~ "expert", "parallelism" ~ "parallel", "sharded" ~ "shard")."""
    for suffix in ("ism", "ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


_PHRASES = [
    (re.compile(rf"\b{words}[ -]+parallel(?:ism)?\b"), abbrev)
    for words, abbrev in (("tensor", "tp"), ("pipeline", "pp"), ("(?:expert|moe)", "ep"),
                          ("(?:sequence|context)", "sp"), ("data", "dp"))
]


def _tokens(text: str) -> list[str]:
    """Lower-case words without stop words, strategy names folded to their abbreviation, suffixes folded."""
    text = text.lower()
    for pattern, abbrev in _PHRASES:
        text = pattern.sub(f" {abbrev} ", text)
    out = []
    for word in re.findall(r"[a-z0-9]+", text):
        if word in _STOP:
            continue
        out.append(_stem(word))
    return out


@cache
def _index() -> tuple[list[Counter[str]], list[int], float, dict[str, int]]:
    """Term counts per rule (title counted twice), document lengths, mean length, document frequencies."""
    docs: list[Counter[str]] = []
    for r in catalog()["rules"]:
        text = " ".join(
            [r["title"], r["title"], r["statement"], r["rationale"], r["id"].replace("-", " "),
             " ".join(r["strategies"]), " ".join(r["node_types"])]
        )
        docs.append(Counter(_tokens(text)))
    lengths = [sum(d.values()) for d in docs]
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    return docs, lengths, sum(lengths) / max(1, len(lengths)), dict(df)


def _query_terms(query: str) -> list[str]:
    terms = _tokens(query)
    extra = [_ALIASES[t] for t in terms if t in _ALIASES]
    return list(dict.fromkeys(terms + extra))


def _bm25(query: str) -> list[float]:
    docs, lengths, avg, df = _index()
    n, k1, b = len(docs), 1.2, 0.75
    scores = [0.0] * n
    for term in _query_terms(query):
        if term not in df:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / avg))
    return scores


def _pick(value: str, allowed: tuple[str, ...], field: str) -> str:
    for a in allowed:
        if value.strip().lower() == a.lower():
            return a
    raise PdagInputError(field, f"unknown value {shown(value)}", ", ".join(allowed))


def _node_type(value: str) -> str:
    known = sorted({t for r in catalog()["rules"] for t in r["node_types"]})
    v = value.strip().lower()
    for t in known:
        if v in (t.lower(), t.lower().removesuffix("node")):
            return t
    raise PdagInputError("node_type", f"unknown node type {shown(value)}", ", ".join(known))


def _by_id(rule_id: str) -> LookupResult:
    key = rule_id[:MAX_MATCHED].strip().upper()
    for r in catalog()["rules"]:
        if r["id"] == key:
            return LookupResult(rules=[Rule.model_validate(r)], total_matches=1)
    conflicts = catalog().get("conflicts", [])
    for c in conflicts:
        if c["id"] == key:
            return LookupResult(rules=[], total_matches=1, conflicts=[Conflict.model_validate(c)])
    pool = rule_ids() + [c["id"] for c in conflicts]
    # errors.closest lower-cases the name; the ids are upper case, so compare in upper case here.
    near = difflib.get_close_matches(key, pool, n=5, cutoff=0.3) or closest(key, pool, n=5)
    raise PdagInputError("rule_id", f"no rule with id {shown(rule_id)}", "closest ids: " + ", ".join(near))


def lookup_rule(
    rule_id: str | None = None,
    query: str | None = None,
    strategy: str | None = None,
    phase: str | None = None,
    node_type: str | None = None,
    layer: str | None = None,
    limit: int = 10,
) -> LookupResult:
    """Rules by id (case-insensitive), by free-text relevance, and/or by topic filters.

    ``layer`` is the rule's scope level (request, structural, operator, plan, graph).  ``phase`` "prefill" or
    "decode" also matches rules that hold in both phases.  With only filters, rules come in catalog order; with a
    query, by relevance (ties by id).  Raises PdagInputError for an unknown id or filter value.
    """
    for name, value in (("rule_id", rule_id), ("query", query), ("strategy", strategy), ("phase", phase),
                        ("node_type", node_type), ("layer", layer)):
        if value is not None and not isinstance(value, str):
            raise PdagInputError(name, f"expected text, got {type(value).__name__}", "a string or null")
        if value is not None and not value.isprintable() and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise PdagInputError(name, "text holds a lone UTF-16 surrogate (not valid Unicode)", "valid UTF-8 text")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise PdagInputError("limit", f"expected an integer, got {type(limit).__name__}", f"1 to {MAX_LIMIT}")
    if rule_id is not None and rule_id.strip():
        return _by_id(rule_id)
    if not 1 <= limit <= MAX_LIMIT:
        raise PdagInputError("limit", f"{limit} is out of range", f"1 to {MAX_LIMIT}")
    if query is not None and len(query) > MAX_QUERY:
        raise PdagInputError("query", f"{len(query)} characters is too long", f"at most {MAX_QUERY}")
    want_strategy = _pick(strategy, STRATEGIES, "strategy") if strategy else None
    want_phase = _pick(phase, PHASES, "phase") if phase else None
    want_type = _node_type(node_type) if node_type else None
    want_level = _pick(layer, LEVELS, "layer") if layer else None

    rules = catalog()["rules"]
    keep = []
    for i, r in enumerate(rules):
        if want_strategy and want_strategy not in r["strategies"]:
            continue
        if want_phase and r["scope"]["phase"] not in (want_phase, "both"):
            continue
        if want_type and want_type not in r["node_types"]:
            continue
        if want_level and r["scope"]["level"] != want_level:
            continue
        keep.append(i)

    scores: list[float] | None = None
    if query and query.strip():
        scores = _bm25(query)
        keep = [i for i in keep if scores[i] > 0]
        keep.sort(key=lambda i: (-round(scores[i], 9), rules[i]["id"]))
    out = []
    for i in keep[:limit]:
        rule = Rule.model_validate(rules[i])
        if scores is not None:
            rule.score = round(scores[i], 3)
        out.append(rule)
    return LookupResult(rules=out, total_matches=len(keep))
