"""The drafts suite: LLM-typical mistakes injected into valid DAGs, and how pdag judges and repairs them.

``python -m evals.run --suite drafts`` draws ``cases`` drafted DAGs (seeded, reproducible): a valid DAG of a
random small plan, drawn the way an LLM writes (nodes and edges shuffled, ids renamed, optional attributes
left out), with one mistake from the catalog's failure modes applied.  It reports

- detection: the share of drafts validate_dag rejects;
- repaired: the share that autofix_dag makes valid within two rounds (the second round runs on the first's
  output), and how many of those it repaired in place;
- root violations per mistake: the median number of root errors reported (the rest carry ``caused_by``);
- terse drafts accepted: the share of the same drafts *without* a mistake that validate (no false alarm
  from the drawing style);
- estimate regret: how much worse the repaired DAG's estimate is than search_strategies' best plan for the
  same model, hardware, workload and objective (e2e latency, or throughput per GPU), median over the repaired
  drafts.  It measures the drafted plans as much as the repairs: the drafts keep their own degrees.

Thresholds live in ``evals/suite.json`` (``drafts``).
"""

from __future__ import annotations

import copy
import json
import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fixtures.generate import (
    P_DENSE,
    P_DP,
    P_MOE,
    P_PP,
    P_SP,
    TINY,
    TINY_MOE,
    bypass,
    dag_of,
    plan,
)
from tools import autofix_dag, estimate_performance, search_strategies, validate_dag

PLANS = [P_DENSE, P_PP, P_DP, P_MOE, P_SP, plan(TINY_MOE, 4, parallel={"tp": 2, "ep": 2, "pp": 2}),
         plan(TINY, 8, parallel={"tp": 4, "pp": 2}, workload={"batch_size": 4}, objective="throughput")]
OPTIONAL = ("phase", "replica", "stage", "layer", "layers", "op", "role", "tp_rank", "ep_rank")

Doc = dict[str, Any]


def _of(d: Doc, *types: str) -> list[Doc]:
    return [n for n in d["nodes"] if n["type"] in types]


def _edges(d: Doc, pred: Callable[[Doc], bool]) -> list[Doc]:
    return [e for e in d["edges"] if pred(e)]


def drop_allreduce(d: Doc, rnd: random.Random) -> bool:
    ars = [n for n in _of(d, "AllReduceNode") if n.get("role") == "tp_sync"]
    if not ars:
        return False
    bypass(d, rnd.choice(ars)["id"])
    return True


def dead_end_shard(d: Doc, rnd: random.Random) -> bool:
    ars = {n["id"] for n in _of(d, "AllReduceNode")}
    shard = {n["id"] for n in _of(d, "AttentionNode", "FFNNode") if n.get("tp_rank") is not None}
    cands = _edges(d, lambda e: e["source"] in shard and e["target"] in ars)
    if not cands:
        return False
    d["edges"].remove(rnd.choice(cands))
    return True


def drop_sendrecv(d: Doc, rnd: random.Random) -> bool:
    sends = _of(d, "SendRecvNode")
    if not sends:
        return False
    bypass(d, rnd.choice(sends)["id"])
    return True


def short_sendrecv(d: Doc, rnd: random.Random) -> bool:
    sends = _of(d, "SendRecvNode")
    if not sends:
        return False
    n = rnd.choice(sends)
    srcs = {e["source"] for e in d["edges"] if e["target"] == n["id"]}
    devs = sorted({x for m in d["nodes"] if m["id"] in srcs for x in m["devices"]})
    if not devs or devs == n["devices"]:
        return False
    n["devices"] = devs
    return True


def _drop_edge_of(kind: str) -> Callable[[Doc, random.Random], bool]:
    """A mistake that loses one edge of ``kind`` (sync: the first-token edge; kv: a KV hand-off)."""
    def drop(d: Doc, rnd: random.Random) -> bool:
        cands = _edges(d, lambda e: e["type"] == kind)
        if not cands:
            return False
        d["edges"].remove(rnd.choice(cands))
        return True
    return drop


drop_first_token = _drop_edge_of("sync")
drop_kv_edge = _drop_edge_of("kv")


def swap_layers(d: Doc, rnd: random.Random) -> bool:
    stages: dict[Any, set[int]] = {}
    for n in d["nodes"]:
        if n.get("layer") is not None and n.get("phase") == "prefill":
            stages.setdefault(n.get("stage"), set()).add(n["layer"])
    pairs = [(s, a) for s, ls in stages.items() for a in ls if a + 1 in ls]
    if not pairs:
        return False
    s, a = rnd.choice(pairs)
    for n in d["nodes"]:
        if n.get("phase") == "prefill" and n.get("stage") == s and n.get("layer") in (a, a + 1):
            n["layer"] = a + 1 if n["layer"] == a else a
    return True


def retype_norm(d: Doc, rnd: random.Random) -> bool:
    norms = [n for n in _of(d, "NormNode") if n.get("role") in ("pre_attention", "pre_ffn")]
    if not norms:
        return False
    rnd.choice(norms)["type"] = "AllReduceNode"
    return True


def stack_shards(d: Doc, rnd: random.Random) -> bool:
    shards = [n for n in _of(d, "AttentionNode", "FFNNode") if n.get("tp_rank") not in (None, 0)]
    if not shards:
        return False
    n = rnd.choice(shards)
    sib = [m for m in d["nodes"] if m.get("op") == n.get("op") and m.get("tp_rank") == 0 and m["type"] == n["type"]]
    if not sib:
        return False
    n["devices"] = list(sib[0]["devices"])
    return True


MISTAKES: dict[str, Callable[[Doc, random.Random], bool]] = {
    "drop_allreduce": drop_allreduce, "dead_end_shard": dead_end_shard, "drop_sendrecv": drop_sendrecv,
    "short_sendrecv": short_sendrecv, "drop_first_token": drop_first_token, "swap_layers": swap_layers,
    "retype_norm": retype_norm, "stack_shards": stack_shards, "drop_kv_edge": drop_kv_edge,
}


# The attribute a mistake lives in stays drawn (left out, the mistake would be gone, not hidden).
KEEPS = {"swap_layers": ("layer",)}


def styled(d: Doc, rnd: random.Random, keep: tuple[str, ...] = ()) -> Doc:
    """How an LLM draws: any order, its own ids, optional attributes often left out."""
    d = copy.deepcopy(d)
    rnd.shuffle(d["nodes"])
    rnd.shuffle(d["edges"])
    drop = [f for f in OPTIONAL if rnd.random() < 0.3 and f not in keep]
    for n in d["nodes"]:
        for f in drop:
            n.pop(f, None)
    if rnd.random() < 0.5:
        m = {n["id"]: f"{n['type'][:4].lower()}{i}" for i, n in enumerate(d["nodes"])}
        for n in d["nodes"]:
            n["id"] = m[n["id"]]
        for e in d["edges"]:
            e["source"], e["target"] = m[e["source"]], m[e["target"]]
        for f in (d.get("folds") or {}).get("layers", []):
            f["nodes"] = [m[x] for x in f["nodes"]]
            f["carry"] = [[m[a], m[b]] for a, b in f["carry"]]
    return d


@dataclass
class Outcome:
    mistake: str
    detected: bool
    roots: int
    repaired: bool
    in_place: bool
    style_ok: bool
    regret: float | None = None


_BEST: dict[str, Any] = {}


def _best(p: dict[str, Any]) -> Any:
    """search_strategies' best plan for a draft's plan settings (cached: a few plans serve every draft)."""
    key = json.dumps({k: p.get(k) for k in ("model", "hardware", "workload", "objective")}, sort_keys=True)
    if key not in _BEST:
        r = search_strategies(model=p["model"], hardware=p["hardware"], workload=p.get("workload"),
                              objective=p.get("objective", "latency"))
        _BEST[key] = r.top[0] if r.top else None
    return _BEST[key]


def regret(fixed: Doc, p: dict[str, Any]) -> float | None:
    """Relative shortfall of the repaired DAG's estimate against the searched best (0 = as good)."""
    best = _best(p)
    if best is None:
        return None
    est = estimate_performance(dag=copy.deepcopy(fixed))
    if p.get("objective", "latency") == "throughput":
        mine = est.static_batch_throughput.output_tokens_per_s / max(1, est.gpus_used)  # as search's
        return max(0.0, best.throughput_per_gpu / mine - 1) if mine > 0 else None
    return max(0.0, est.e2e_latency_ms / best.e2e_ms - 1) if best.e2e_ms > 0 else None


def draft(rnd: random.Random) -> tuple[str, Doc, Doc] | None:
    """One (mistake, drafted DAG with the mistake, the same draft without it), or None when the mistake does
    not apply to the drawn plan."""
    base = copy.deepcopy(dag_of(rnd.choice(PLANS)))
    name = rnd.choice(sorted(MISTAKES))
    broken = copy.deepcopy(base)
    if not MISTAKES[name](broken, rnd):
        return None
    seed = rnd.randrange(1 << 30)
    keep = KEEPS.get(name, ())
    return name, styled(broken, random.Random(seed), keep), styled(base, random.Random(seed), keep)


def judge(name: str, broken: Doc, clean: Doc) -> Outcome:
    v = validate_dag(dag=copy.deepcopy(broken))
    roots = sum(1 for x in v.violations if x.severity == "error" and x.caused_by is None)
    r = autofix_dag(dag=copy.deepcopy(broken))
    in_place = r.repair == "in_place"
    if not r.valid and r.dag is not None:
        r = autofix_dag(dag=copy.deepcopy(r.dag))
    plan_ = (r.dag or {}).get("plan") or broken.get("plan")
    loss = regret(r.dag, plan_) if r.valid and r.dag is not None and isinstance(plan_, dict) else None
    return Outcome(name, not v.valid, roots, r.valid, in_place, validate_dag(dag=copy.deepcopy(clean)).valid, loss)


def run_drafts(cases: int = 1000, seed: int = 13) -> dict[str, Any]:
    """The suite's figures over ``cases`` drafts (seeded: the same figures every run)."""
    rnd = random.Random(seed)
    out: list[Outcome] = []
    while len(out) < cases:
        made = draft(rnd)
        if made is not None:
            out.append(judge(*made))
    detected = [o for o in out if o.detected]
    per = Counter(o.mistake for o in out)
    missed = Counter(o.mistake for o in out if not o.detected)
    return {
        "cases": len(out),
        "detection": len(detected) / len(out),
        "repaired_within_2_rounds": sum(o.repaired for o in out) / len(out),
        "repaired_in_place": sum(o.in_place for o in out) / len(out),
        "median_root_violations_per_mistake": statistics.median(o.roots for o in detected) if detected else 0,
        "terse_drafts_accepted": sum(o.style_ok for o in out) / len(out),
        "median_estimate_regret": statistics.median(losses) if (losses := [o.regret for o in out
                                                                         if o.regret is not None]) else None,
        "by_mistake": {k: {"cases": n, "missed": missed.get(k, 0)} for k, n in sorted(per.items())},
    }


def passes(fig: dict[str, Any], cfg: dict[str, Any]) -> bool:
    return (fig["detection"] >= cfg["min_detection"] and fig["repaired_within_2_rounds"] >= cfg["min_repaired"]
            and fig["median_root_violations_per_mistake"] <= cfg["max_median_root_violations"]
            and fig["terse_drafts_accepted"] >= cfg["min_terse_accepted"])


def text(fig: dict[str, Any]) -> str:
    lines = [f"drafts: {fig['cases']} drafted DAGs, one injected mistake each",
             f"  detection                      {fig['detection']:.1%}",
             f"  repaired within 2 autofix rounds {fig['repaired_within_2_rounds']:.1%} "
             f"(in place: {fig['repaired_in_place']:.1%})",
             f"  median root violations/mistake {fig['median_root_violations_per_mistake']}",
             f"  terse drafts without mistake accepted {fig['terse_drafts_accepted']:.1%}",
             "  median estimate regret vs search " + (f"{fig['median_estimate_regret']:.1%}"
                                                      if fig["median_estimate_regret"] is not None else "n/a")]
    lines += [f"  {k:<18} {v['cases']:>4} cases, {v['missed']} missed" for k, v in fig["by_mistake"].items()]
    return "\n".join(lines)
