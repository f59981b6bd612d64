"""autofix_dag repairs the agent's own drawing in place where the defect is local (issue 13)."""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.generate import P_DENSE, P_PP, TINY_MOE, bypass, dag_of, drop_edges, plan, set_attr
from tests.test_normalize import renamed
from tools import autofix_dag, validate_dag

R = "r0.prefill"


def dense() -> dict:
    return copy.deepcopy(dag_of(P_DENSE))


def apply_patch(doc: dict, patch: list[dict]) -> dict:
    """A minimal RFC 6902 applier for the ops repair emits (add / remove / replace on lists and objects)."""
    doc = copy.deepcopy(doc)
    for op in patch:
        *parent, last = op["path"].lstrip("/").split("/")
        target = doc
        for part in parent:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[int(last)]
        elif isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            target[last] = op["value"]
    return doc


CASES = {
    "missing allreduce": lambda: bypass(dense(), f"{R}.L1.attn.allreduce"),
    "dead-end shard": lambda: drop_edges(dense(), lambda e: (e["source"], e["target"]) ==
                                         (f"{R}.L1.attn.t1", f"{R}.L1.attn.allreduce")),
    "missing sendrecv": lambda: bypass(copy.deepcopy(dag_of(P_PP)), f"{R}.s0.send"),
    "sendrecv short of GPUs": lambda: set_attr(copy.deepcopy(dag_of(P_PP)), f"{R}.s0.send", devices=[0, 1]),
    "no first-token edge": lambda: drop_edges(dense(), lambda e: e["type"] == "sync"),
    "norm typed as a collective": lambda: set_attr(dense(), f"{R}.L1.norm_attn", type="AllReduceNode"),
    "shard stacked on a sibling's GPU": lambda: set_attr(set_attr(dense(), f"{R}.L1.ffn.t1", devices=[0]),
                                                         f"{R}.L2.attn.t1", devices=[0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("with_plan", [True, False])
def test_local_defects_are_repaired_in_place(name, with_plan):
    broken = CASES[name]()
    if not with_plan:
        broken.pop("plan")
        broken["model"] = "no-such-model"  # nothing to rebuild from: only an in-place repair can help
    assert not validate_dag(dag=copy.deepcopy(broken)).valid
    r = autofix_dag(dag=copy.deepcopy(broken))
    assert r.valid and r.repair == "in_place", (r.summary, [v.rule_id for v in r.violations])
    kept = {n["id"] for n in broken["nodes"]}
    assert kept <= {n["id"] for n in r.dag["nodes"]}  # the drawing is kept: nothing removed or renamed
    assert apply_patch(broken, r.patch) == r.dag
    assert all(c.rule_id for c in r.changes)


def test_renamed_drawing_keeps_its_names():
    broken = renamed(bypass(dense(), f"{R}.L1.attn.allreduce"), 7)
    r = autofix_dag(dag=copy.deepcopy(broken))
    assert r.valid and r.repair == "in_place"
    assert {n["id"] for n in broken["nodes"]} <= {n["id"] for n in r.dag["nodes"]}


def test_beyond_local_repair_is_rebuilt_and_says_so():
    d = dense()
    for n in d["nodes"]:
        if n["type"] == "AttentionNode":
            n["tp_rank"] = 0
            n["devices"] = [0]
    r = autofix_dag(dag=d)
    assert r.repair == "rebuilt" and "rebuilt" in r.summary


def expert_per_expert() -> dict:
    """A MoE DAG at EP 2 drawn with one Expert node per expert: two on each GPU."""
    d = copy.deepcopy(dag_of(plan(TINY_MOE, 2, parallel={"ep": 2})))
    for n in [n for n in d["nodes"] if n["type"] == "ExpertNode"]:
        first, second = n["experts"]
        n["experts"] = [first]
        n.pop("ep_rank", None)
        twin = {**copy.deepcopy(n), "id": n["id"] + "b", "experts": [second]}
        d["nodes"].append(twin)
        d["edges"] += [{**e, "target": twin["id"]} for e in d["edges"] if e["target"] == n["id"]]
        d["edges"] += [{**e, "source": twin["id"]} for e in d["edges"] if e["source"] == n["id"]]
    return d


@pytest.mark.parametrize("with_plan", [True, False])
def test_expert_nodes_sharing_a_gpu_are_merged_in_place(with_plan):
    """EP-EXPERT-NODES-EQ-GPUS used to fall back to a rebuild; the drawing's Expert nodes on one GPU become one."""
    broken = expert_per_expert()
    if not with_plan:
        broken.pop("plan")
        broken["model"] = "no-such-model"
    assert "EP-EXPERT-NODES-EQ-GPUS" in {v.rule_id for v in validate_dag(dag=copy.deepcopy(broken)).violations}
    r = autofix_dag(dag=copy.deepcopy(broken))
    assert r.valid and r.repair == "in_place", (r.summary, [v.rule_id for v in r.violations])
    assert apply_patch(broken, r.patch) == r.dag
    experts = [n for n in r.dag["nodes"] if n["type"] == "ExpertNode"]
    assert {len(n["experts"]) for n in experts} == {2} and len(experts) == 2 * 2 * 2  # per GPU, layer, phase
    assert all(c.rule_id == "EP-EXPERT-NODES-EQ-GPUS" for c in r.changes)


def test_expert_nodes_holding_the_same_experts_are_not_merged_into_a_split():
    """Two nodes on one GPU listing the same experts are a copy: merging them leaves an expert unheld, so autofix
    rebuilds from the plan instead of returning a merged drawing."""
    broken = expert_per_expert()
    e0 = next(n for n in broken["nodes"] if n["id"] == "r0.prefill.L0.e0")
    next(n for n in broken["nodes"] if n["id"] == "r0.prefill.L0.e0b")["experts"] = list(e0["experts"])
    r = autofix_dag(dag=copy.deepcopy(broken))
    assert r.valid and r.repair == "rebuilt"
