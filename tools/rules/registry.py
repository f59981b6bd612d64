"""Rule registry: one checker (and optionally one fixer) per catalog rule id, plus the Context they read.

Checkers are generators of ``Finding``s over a ``Context``; the registry adds the rule's severity, seed source
and default hint from ``knowledge/rules/catalog.json``, so a checker only says *what it found*.
Fixers take a plan dict (a deep copy they may edit) and the context, and return ``Change``s (empty: cannot fix).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, Field

from knowledge import ROOT as KNOWLEDGE_ROOT
from knowledge import load_json
from tools.core.dag import COMM_TYPES, CONTROL_TYPES, NodeType
from tools.core.layout import Layout
from tools.core.models import ModelSpec
from tools.core.plan import DEFAULT_GPUS_PER_NODE, Plan
from tools.core.working import LayerFold, ReplicaFold, WorkingDag, replica_members
from tools.core.working import gpus_used as working_gpus

Severity = Literal["error", "warning"]
Needs = Literal["raw", "any", "plan", "graph", "late"]
MAX_LOCATION_NODES = 5
_NO_LAYER = CONTROL_TYPES | {NodeType.SEND_RECV, NodeType.KV_TRANSFER, NodeType.LM_HEAD}


class Location(BaseModel):
    nodes: list[str] = Field(default_factory=list, description="up to 5 DAG node ids")
    field: str | None = Field(None, description="dotted path of the plan field, e.g. plan.parallel.tp")


class Source(BaseModel):
    seed: str
    section: str


class Violation(BaseModel):
    rule_id: str
    severity: Severity
    message: str = Field(description="what was found and what the rule requires")
    location: Location = Field(default_factory=Location)
    source: list[Source] = Field(default_factory=list, description="seed and section the rule comes from")
    hint: str | None = Field(None, description="how to fix it")
    caused_by: str | None = Field(None, description="the root violation this one follows from (rule id at its "
                                  "location): fixing that one first usually clears this one")


class Change(BaseModel):
    rule_id: str
    severity: Severity = "error"
    message: str = Field(description="what changed and why")
    field: str | None = None
    before: Any = None
    after: Any = None


def set_degree(plan: dict[str, Any], degree: str, value: int, rule_id: str, why: str,
               severity: Severity = "error") -> list[Change]:
    """Set a plan-wide degree and drop the phase overrides that disagree with it, recording each change."""
    changes = []
    par = plan.setdefault("parallel", {})
    old = par.get(degree, 1)
    if old != value:
        changes.append(Change(rule_id=rule_id, severity=severity, message=f"set {degree} from {old} to {value}: {why}",
                              field=f"plan.parallel.{degree}", before=old, after=value))
        par[degree] = value
    for ph, o in (plan.get("phases") or {}).items():
        if isinstance(o, dict) and o.get(degree) not in (None, value):
            changes.append(Change(rule_id=rule_id, severity=severity, message=f"removed phases.{ph}.{degree}: {why}",
                                  field=f"plan.phases.{ph}.{degree}", before=o.pop(degree), after=None))
    return changes


@dataclass
class Finding:
    """What a checker reports; the registry turns it into a Violation."""

    message: str
    nodes: Iterable[str] = ()
    field: str | None = None
    hint: str | None = None


Checker = Callable[["Context"], Iterable[Finding]]
Fixer = Callable[[dict[str, Any], "Context"], list[Change]]


@dataclass(frozen=True)
class CheckerEntry:
    rule_id: str
    fn: Checker
    needs: tuple[Needs, ...]


CHECKERS: dict[str, CheckerEntry] = {}
FIXERS: dict[str, Fixer] = {}
# Rules pdag checks that the catalog does not (yet) describe: severity and a short statement.
EXTRA_RULES: dict[str, dict[str, Any]] = {}


def checker(rule_id: str, needs: Needs | tuple[Needs, ...] = "graph") -> Callable[[Checker], Checker]:
    """Register ``fn`` as the checker of ``rule_id``; ``needs`` says what input it reads: the raw plan dict
    (before parsing), 'any' (always runs), the parsed plan, the graph, or 'late' (after every other checker,
    reading their violations)."""

    def deco(fn: Checker) -> Checker:
        if rule_id in CHECKERS:
            raise RuntimeError(f"two checkers for {rule_id}")
        CHECKERS[rule_id] = CheckerEntry(rule_id, fn, needs if isinstance(needs, tuple) else (needs,))
        return fn

    return deco


def fixer(rule_id: str) -> Callable[[Fixer], Fixer]:
    def deco(fn: Fixer) -> Fixer:
        if rule_id in FIXERS:
            raise RuntimeError(f"two fixers for {rule_id}")
        FIXERS[rule_id] = fn
        return fn

    return deco


def dotted(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__name__}"


CATALOG_FILE = KNOWLEDGE_ROOT / "rules" / "catalog.json"  # sync_catalog writes here


@cache
def catalog() -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in load_json("rules/catalog.json")["rules"]}


def param(rule_id: str, name: str) -> float:
    """A threshold of a rule, as the catalog states it (rule numbers are knowledge, not code)."""
    return catalog()[rule_id]["parameters"][name]


def rule_meta(rule_id: str) -> dict[str, Any]:
    return catalog().get(rule_id) or EXTRA_RULES.get(rule_id) or {"severity": "error", "source": []}


# ----------------------------------------------------------------------------------------------- context
def sorted_ids(nodes: Iterable[str]) -> list[str]:
    return sorted(set(nodes))[:MAX_LOCATION_NODES]


@dataclass
class Context:
    """Everything checkers may read.  Any of plan / graph may be missing (a hand-drafted DAG has no plan;
    a plan whose degrees cannot be built has no graph).

    ``from_plan``: the graph was built by pdag from ``plan`` with a single replica; DP replicas are
    device-shifted copies of replica 0 by construction (tools.core.build.clone_replicas), so checking replica 0 in
    depth covers them, and replica-level facts (GPU counts, node boundaries) are derived from the layout.
    """

    plan: Plan | None = None
    raw_plan: dict[str, Any] | None = None
    graph: nx.DiGraph | None = None
    layout: Layout | None = None
    spec: ModelSpec | None = None
    from_plan: bool = False
    claims: dict[str, Any] = field(default_factory=dict)
    schema_errors: list[tuple[str, str, str]] = field(default_factory=list)  # (rule_id, path, message)
    duplicate_ids: list[str] = field(default_factory=list)
    dangling: list[tuple[str, str]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)  # filled for 'late' checkers
    notes: list[str] = field(default_factory=list)  # internal failures, reported rather than raised
    replica_folds: list[ReplicaFold] = field(default_factory=list)
    layer_folds: list[LayerFold] = field(default_factory=list)
    inferences: list[Any] = field(default_factory=list)  # attributes normalization filled in (tools.core.normalize)
    # a DAG document as read (draft vocabulary translated, implicit structure drawn): what validate judges, so what
    # autofix repairs and names its model from
    read_doc: dict[str, Any] | None = None

    def set_working(self, working: WorkingDag) -> None:
        """Judge this working DAG: its graph, with the replica and layer folds it states."""
        self.graph = working.graph
        self.replica_folds = list(working.replicas)
        self.layer_folds = list(working.layers)
        self.inferences = list(working.inferences)

    @property
    def working(self) -> WorkingDag:
        return WorkingDag(self.g, self.replica_folds, self.layer_folds)

    # ------------------------------------------------------------------ folds
    def repeat(self, n: str) -> int:
        """How many identical layers node ``n`` stands for (1 unless it belongs to a layer fold)."""
        r = self.nattr[n].get("repeat")
        return r if isinstance(r, int) and r > 1 else 1

    def layer_span(self, n: str) -> range:
        """The layers node ``n`` stands for: its own layer, or every layer of its fold."""
        lyr = self.inherited[n]["layer"]
        if lyr is None:
            return range(0)
        return range(lyr, lyr + self.repeat(n))

    @cached_property
    def replica_members(self) -> dict[str, list[str]]:
        """Folded replica node -> the drawn nodes that stand for its copies."""
        return {f.node: replica_members(self.g, f.node) for f in self.replica_folds if f.node in self.g}

    @cached_property
    def copies(self) -> dict[str, int]:
        """How many replicas each node stands for (1 unless it is under a replica fold)."""
        out: dict[str, int] = {}
        for f in self.replica_folds:
            for n in self.replica_members.get(f.node, ()):
                out[n] = max(out.get(n, 1), f.count)
        return out

    # ------------------------------------------------------------------ plan facts
    @property
    def num_gpus(self) -> int | None:
        if self.plan is not None:
            return self.plan.hardware.num_gpus
        return None

    @property
    def gpus_per_node(self) -> int:
        if self.plan is not None:
            return self.plan.hardware.gpus_per_node
        return DEFAULT_GPUS_PER_NODE

    @property
    def nvlink_domain(self) -> int:
        """GPUs of one NVLink domain: a node, or a whole NVL72 rack for accelerators whose domain spans nodes."""
        if self.plan is not None:
            return self.plan.cluster.nvlink_domain
        return DEFAULT_GPUS_PER_NODE

    @property
    def options(self) -> Any:
        """The plan's options; without a plan, the opt-ins the draft states (``OPT_INS``), else the defaults."""
        from tools.core.plan import OPT_INS, Options

        if self.plan is not None:
            return self.plan.options
        stated = self.claims.get("options")  # a plan-less draft's own opt-ins (its metadata: tools/drafts/dialect.py)
        flags = {k: v for k, v in stated.items() if k in OPT_INS and isinstance(v, bool)} \
            if isinstance(stated, dict) else {}
        return Options(**flags)

    @cached_property
    def gpus_used(self) -> int:
        """Distinct GPUs of compute/communication nodes, each folded replica's GPUs counted once per copy
        (copies are disjoint by construction: a fold's stride is at least its replica's device span)."""
        return working_gpus(self.working, self.replica_members)

    @cached_property
    def replica_count(self) -> int:
        """DP replicas the DAG stands for: ReplicaNodes drawn, plus the copies their folds state."""
        drawn = set(self.of(NodeType.REPLICA))
        return len(drawn) + sum(f.count - 1 for f in self.replica_folds if f.node in drawn)

    def replica_span(self, node: str, member_devices: set[int]) -> set[int]:
        """The GPUs a folded replica owns: its ReplicaNode's devices, else those of what hangs under it."""
        return set(self.devices.get(node, ())) or set(member_devices)

    # ------------------------------------------------------------------ graph indexes (linear passes)
    @cached_property
    def g(self) -> nx.DiGraph:
        assert self.graph is not None
        return self.graph

    @cached_property
    def types(self) -> dict[str, str]:
        return {n: a.get("type", "") for n, a in self.g._node.items()}

    @cached_property
    def devices(self) -> dict[str, frozenset[int]]:
        return {n: frozenset(a.get("devices") or ()) for n, a in self.g._node.items()}

    @cached_property
    def by_type(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for n, t in self.types.items():
            out[t].append(n)
        return out

    def of(self, *types: NodeType) -> list[str]:
        out: list[str] = []
        for t in types:
            out.extend(self.by_type.get(str(t), ()))
        return out

    def is_comm(self, n: str) -> bool:
        return self.types[n] in COMM_TYPES

    @cached_property
    def real_nodes(self) -> list[str]:
        """Compute, communication and state nodes (not containers)."""
        return [n for n, t in self.types.items() if t not in CONTROL_TYPES]

    @cached_property
    def _order(self) -> list[str] | None:
        if self.g.graph.get("topological"):  # normalized: the canonical order is topological
            return list(self.g)
        try:
            return list(nx.topological_sort(self.g))
        except nx.NetworkXUnfeasible:
            return None

    @cached_property
    def acyclic(self) -> bool:
        return self._order is not None

    @cached_property
    def topo(self) -> list[str]:
        """Topological order (insertion order when the graph has a cycle)."""
        return self._order if self._order is not None else list(self.g.nodes)

    @cached_property
    def succ(self) -> dict[str, dict[str, dict[str, Any]]]:
        return self.g._succ  # plain dict-of-dicts: much faster than the networkx views in tight loops

    @cached_property
    def pred(self) -> dict[str, dict[str, dict[str, Any]]]:
        return self.g._pred

    @cached_property
    def nattr(self) -> dict[str, dict[str, Any]]:
        return self.g._node

    @cached_property
    def edge_list(self) -> list[tuple[str, str, str]]:
        return [(u, v, str(a.get("type", "data"))) for u, nb in self.g._succ.items() for v, a in nb.items()]

    def attr(self, n: str, name: str) -> Any:
        return self.nattr[n].get(name)

    @cached_property
    def inherited(self) -> dict[str, dict[str, Any]]:
        """replica / phase / stage / layer of every node: its own attribute, else the one of its first
        predecessor that has it (one pass in topological order), so hand-drafted DAGs that label only the
        container nodes still get every operator placed.  Sync edges are not followed (they cross phases)."""
        keys = ("replica", "phase", "stage", "layer")
        out: dict[str, dict[str, Any]] = {}
        nodes, types, pred = self.nattr, self.types, self.pred
        replica_index = {r: i for i, r in enumerate(self.of(NodeType.REPLICA))}
        for n in self.topo:
            own = nodes[n]
            vals = {k: own.get(k) for k in keys}
            if vals["replica"] is None and n in replica_index:
                vals["replica"] = replica_index[n]
            if vals["phase"] is None and types[n] == NodeType.PHASE:
                low = n.lower()
                vals["phase"] = "prefill" if "prefill" in low else "decode" if "decode" in low else None
            if None in vals.values():
                missing = [k for k in keys if vals[k] is None]
                for p, et in pred[n].items():
                    if et.get("type") == "sync" or p not in out:
                        continue
                    pv = out[p]
                    for k in missing:
                        if vals[k] is None and pv.get(k) is not None:
                            if k == "layer" and (types[p] in CONTROL_TYPES or types[n] in _NO_LAYER):
                                continue
                            vals[k] = pv[k]
            out[n] = vals
        return out

    @cached_property
    def rp(self) -> dict[str, tuple[Any, Any]]:
        return {n: (v["replica"], v["phase"]) for n, v in self.inherited.items()}

    @cached_property
    def rps(self) -> dict[str, tuple[Any, Any, Any]]:
        return {n: (v["replica"], v["phase"], v["stage"]) for n, v in self.inherited.items()}

    @cached_property
    def rpl(self) -> dict[str, tuple[Any, Any, Any]]:
        return {n: (v["replica"], v["phase"], v["layer"]) for n, v in self.inherited.items()}

    @cached_property
    def phase(self) -> dict[str, Any]:
        return {n: v["phase"] for n, v in self.inherited.items()}

    def key(self, n: str, *names: str) -> tuple[Any, ...]:
        v = self.inherited[n]
        return tuple(v.get(k) for k in names)

    @cached_property
    def replicas(self) -> list[Any]:
        return sorted({v["replica"] for v in self.inherited.values() if v["replica"] is not None}, key=str)

    def data_edges(self) -> list[tuple[str, str, str]]:
        return self.edge_list

    @cached_property
    def ops(self) -> dict[Any, list[str]]:
        """Sharded operators: nodes with a tp/sp/ep rank grouped by ``op`` (or by replica/phase/layer/type)."""
        out: dict[Any, list[str]] = defaultdict(list)
        for n, a in self.g.nodes(data=True):
            if a.get("tp_rank") is None and a.get("sp_rank") is None and a.get("ep_rank") is None:
                continue
            if a.get("type") == NodeType.KV_CACHE:
                continue
            op = a.get("op")
            # an op names one operator instance; a drafter's op naming an operator kind ("attention") across
            # layers still groups shards per replica, phase and layer
            where = self.key(n, "replica", "phase", "layer")
            k = (op, a.get("type"), *where) if op else (*where, a.get("type"))
            out[k].append(n)
        return out

    @cached_property
    def inferred_degrees(self) -> dict[str, int]:
        """Degrees a DAG shows: replicas, stages per branch, widest TP/SP shard group, Expert nodes per layer."""
        dp = max(1, self.replica_count)
        stages: dict[Any, set[Any]] = defaultdict(set)
        for n in self.of(NodeType.STAGE):
            stages[self.key(n, "replica", "phase")].add(self.inherited[n]["stage"] if self.inherited[n]["stage"]
                                                         is not None else n)
        pp = max((len(s) for s in stages.values()), default=1)
        tp = sp = ep = 1
        for (_, *_rest), shards in self.ops.items():
            t = self.types[shards[0]]
            if t == NodeType.EXPERT:
                ranks = {self.attr(s, "ep_rank") for s in shards}
                ep = max(ep, len(ranks) if None not in ranks else len(shards))
            else:
                tp = max(tp, self.tp_width(shards))
                sp = max(sp, self.sp_width(shards))
        experts: dict[Any, int] = defaultdict(int)
        for n in self.of(NodeType.EXPERT):
            if self.attr(n, "ep_rank") is None:
                experts[self.key(n, "replica", "phase", "layer")] += 1
        ep = max(ep, max(experts.values(), default=1))
        return {"dp": dp, "pp": pp, "tp": tp, "ep": ep, "sp": sp}

    def tp_width(self, shards: list[str]) -> int:
        return len({self.attr(s, "tp_rank") for s in shards if self.attr(s, "tp_rank") is not None})

    def sp_width(self, shards: list[str]) -> int:
        return len({self.attr(s, "sp_rank") for s in shards if self.attr(s, "sp_rank") is not None})


def scope(replica: Any, phase: Any = None) -> str:
    """Where in a DAG a finding is: 'replica 0 decode', or 'decode' in a DAG drawn without ReplicaNodes (whose
    replica is None, which a message must not print)."""
    parts = ([f"replica {replica}"] if replica is not None else []) + ([str(phase)] if phase is not None else [])
    return " ".join(parts) or "the DAG"


def layer_at(key: tuple[Any, Any, Any]) -> str:
    """A (replica, phase, layer) key as words: 'layer 3 (replica 0 decode)', the parts a DAG leaves unsaid left out."""
    r, ph, lyr = key
    where = scope(r, ph) if r is not None or ph is not None else ""
    return (f"layer {lyr}" if lyr is not None else "a layer") + (f" ({where})" if where else "")


def field_of(phase: str | None, name: str, plan: Plan | None = None) -> str:
    """Path of a degree: the phase override when that phase overrides it, else plan.parallel."""
    if phase and plan is not None:
        override = getattr(plan.phases, phase)
        if override is not None and getattr(override, name) is not None:
            return f"plan.phases.{phase}.{name}"
    return f"plan.parallel.{name}"
