"""Hand-drafted DAGs are judged by their meaning (issue 13): the verdict does not depend on node / edge order,
id spelling or optional attributes left out, because every checker runs on the normalized form."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.generate import P_ADP, P_DENSE, P_DIS, P_DP, P_MOE, P_PP, P_SP, TINY_MOE, plan
from tools import validate_dag
from tools.core.build import build_dag, build_full_dag
from tools.core.normalize import normalize
from tools.rules.validate import load_dag

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPTIONAL = ("phase", "replica", "stage", "layer", "layers", "op", "role", "tp_rank", "ep_rank")
P_MOE_PP = plan(TINY_MOE, 4, parallel={"tp": 2, "ep": 2, "pp": 2}, workload={"batch_size": 4})
PLANS = {"dense": P_DENSE, "moe": P_MOE, "pp": P_PP, "dp": P_DP, "sp": P_SP, "adp": P_ADP, "disagg": P_DIS,
         "moe-pp": P_MOE_PP}


class _Docs(dict):
    """Documents built on first use (not at collection: the whole suite would carry them)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, name):
        self[name] = doc = self.make(PLANS[name])
        return doc


FULL = _Docs(build_full_dag)
FOLDED = _Docs(lambda p: build_dag(p).dag)


def verdict(doc: dict) -> tuple[bool, list[str]]:
    v = validate_dag(dag=copy.deepcopy(doc))
    return v.valid, tuple(sorted({x.rule_id for x in v.violations if x.severity == "error"}))


def strip(doc: dict, fields: tuple[str, ...], keep: set[str] = frozenset()) -> dict:
    doc = copy.deepcopy(doc)
    for n in doc["nodes"]:
        if n["id"] not in keep:
            for f in fields:
                n.pop(f, None)
    return doc


def shuffled(doc: dict, seed: int) -> dict:
    doc = copy.deepcopy(doc)
    rnd = random.Random(seed)
    rnd.shuffle(doc["nodes"])
    rnd.shuffle(doc["edges"])
    return doc


def renamed(doc: dict, seed: int) -> dict:
    """Every id replaced by an opaque one (folds follow); op names are left to the drafter's spelling."""
    doc = copy.deepcopy(doc)
    ids = [n["id"] for n in doc["nodes"]]
    rnd = random.Random(seed)
    new = [f"n{i:05d}" for i in range(len(ids))]
    rnd.shuffle(new)
    m = dict(zip(ids, new, strict=True))
    for n in doc["nodes"]:
        n["id"] = m[n["id"]]
    for e in doc["edges"]:
        e["source"], e["target"] = m[e["source"]], m[e["target"]]
    folds = doc.get("folds")
    if folds:
        for f in folds.get("replicas", []):
            f["node"] = m[f["node"]]
        for f in folds.get("layers", []):
            f["nodes"] = [m[x] for x in f["nodes"]]
            f["carry"] = [[m[a], m[b]] for a, b in f["carry"]]
    return doc


# ----------------------------------------------------------------------------------------------- the cases
def test_plain_tp_shards_without_op_are_not_attention_dp():
    doc = strip(FULL["dense"], ("op",))
    assert verdict(doc) == (True, ())


def test_moe_operators_without_layer_stay_inside_their_moe_node():
    keep = {n["id"] for n in FULL["moe"]["nodes"] if n["type"] not in ("ExpertNode", "RouterNode", "AllToAllNode")}
    doc = strip(FULL["moe"], ("layer",), keep)
    assert verdict(doc) == (True, ())


def test_same_gpu_kv_reshard_without_role_is_not_disaggregation():
    sp = build_full_dag(plan(gpus=4, parallel={"tp": 4}, phases={"prefill": {"sp": 2}}, workload={"input_len": 16384}))
    assert any(n.get("role") == "kv_reshard" for n in sp["nodes"])
    assert verdict(strip(sp, ("role",))) == verdict(sp) == (True, ())


def test_phase_only_on_containers_is_order_free():
    keep = {n["id"] for n in FULL["pp"]["nodes"] if n["type"] == "PhaseNode"}
    doc = strip(FULL["pp"], ("phase",), keep)
    assert {verdict(shuffled(doc, s)) for s in range(8)} == {(True, ())}


def test_inferences_are_recorded():
    doc = strip(FULL["pp"], OPTIONAL)
    ctx, _ = load_dag(doc)
    fields = {i.field for i in ctx.inferences}
    assert {"phase", "replica", "stage", "layer", "op", "tp_rank", "role"} <= fields
    assert all(i.why for i in ctx.inferences)


def test_inferred_attributes_equal_the_built_ones():
    """Dropping everything optional and inferring it back gives the attributes pdag drew."""
    for name in ("pp", "moe", "sp", "dp"):
        full = FULL[name]
        ctx, _ = load_dag(strip(full, OPTIONAL))
        want = {n["id"]: n for n in full["nodes"]}
        for f in ("phase", "stage", "layer", "tp_rank", "ep_rank"):
            got = {n: a.get(f) for n, a in ctx.g.nodes(data=True)}
            wrong = [n for n, v in got.items() if want[n].get(f) is not None and v != want[n].get(f)]
            assert not wrong, (name, f, wrong[:3])


def test_canonical_order_ignores_json_order():
    g1, _ = normalize(load_dag(FULL["moe-pp"])[0].g)
    g2, _ = normalize(load_dag(shuffled(FULL["moe-pp"], 3))[0].g)
    assert list(g1) == list(g2)
    assert list(g1.edges) == list(g2.edges)


# ----------------------------------------------------------------------------------------------- properties
@SETTINGS
@given(name=st.sampled_from(sorted(PLANS)), folded=st.booleans(), seed=st.integers(0, 10_000),
       drop=st.sets(st.sampled_from(OPTIONAL), max_size=4), rename=st.booleans())
def test_verdict_is_invariant(name, folded, seed, drop, rename):
    base = (FOLDED if folded else FULL)[name]
    want = verdict(base)
    doc = strip(shuffled(base, seed), tuple(drop))
    if rename:
        doc = renamed(doc, seed)
    assert verdict(doc) == want


@pytest.mark.parametrize("name", sorted(PLANS))
def test_dropping_every_optional_attribute_keeps_the_verdict(name):
    assert verdict(strip(FULL[name], OPTIONAL)) == verdict(FULL[name]) == (True, ())
