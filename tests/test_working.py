"""The working form: folded DAGs get the verdict of their expansion; pages cover the full DAG; hand-drafted DAGs
with replica folds or fully drawn replicas are judged alike."""

from __future__ import annotations

import copy
import json
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.fixtures.generate import TINY, TINY_MOE
from tools import build_dag, validate_dag
from tools.core.build import build_full_dag, build_working
from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan
from tools.core.working import expand, expand_document

degree = st.sampled_from([1, 1, 2, 4])
plans = st.fixed_dictionaries({
    "model": st.sampled_from([TINY, TINY_MOE, "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"]),
    "hardware": st.fixed_dictionaries({"gpu": st.sampled_from(["h100-sxm", "l40s"]),
                                       "num_gpus": st.integers(1, 32), "gpus_per_node": st.sampled_from([4, 8])}),
    "parallel": st.fixed_dictionaries({"dp": st.sampled_from([1, 2, 3]), "pp": st.sampled_from([1, 2, 3]),
                                       "tp": degree, "ep": degree, "sp": st.sampled_from([1, 2])}),
    "phases": st.sampled_from([{}, {"decode": {"sp": 1}}, {"decode": {"tp": 1}}, {"decode": {"dp": 2, "tp": 1}}]),
    "options": st.sampled_from([{}, {"disaggregated": True}, {"allow_attention_dp": True}]),
})


def verdict(result) -> list[tuple[str, str]]:
    return sorted({(v.rule_id, v.severity) for v in result.violations})


def _both(plan):
    try:
        folded = build_dag(plan).dag
    except PdagInputError:
        assume(False)
    return folded, build_full_dag(plan)


@pytest.mark.slow  # every sampled plan drawn layer by layer and validated twice: ~16 s; .ci/run runs it
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans)
def test_expanded_and_folded_get_the_same_verdict(plan):
    folded, full = _both(plan)
    a, b = validate_dag(dag=full), validate_dag(dag=folded)
    assert verdict(a) == verdict(b)
    with patch("tools.rules.validate.fold_drawn_replicas", lambda g: []):  # every replica judged as drawn
        drawn = validate_dag(dag=full)
    assert verdict(drawn) == verdict(a) and drawn.gpus_used == a.gpus_used
    assert not [n for n in a.notes + b.notes if "failed" in n]
    assert validate_dag(dag=full).gpus_used == validate_dag(dag=folded).gpus_used == build_dag(plan).gpus_used


def test_expansion_repeats_layers_and_replicas():
    plan = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 32}, "parallel": {"dp": 2, "tp": 8,
                                                                                               "ep": 16}}
    working = build_working(parse_plan(plan))
    assert [(f.first_layer, f.repeat) for f in working.layers] == [(0, 3), (3, 58)] * 2
    doc = expand_document(working)
    ids = {n["id"] for n in doc["nodes"]}
    assert {"r1.decode.L60.e15", "r0.prefill.L2.ffn.t7", "r1.prefill.L3.router"} <= ids
    layers = {n["layer"] for n in doc["nodes"] if n["id"].startswith("r1.prefill.L")}
    assert layers == set(range(61))
    assert all("repeat" not in n for n in doc["nodes"])
    e15 = next(n for n in doc["nodes"] if n["id"] == "r1.decode.L60.e15")
    assert e15["devices"] == [16 + 15] and e15["replica"] == 1


def test_pages_are_bounded_and_cover_the_full_dag():
    plan = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"dp": 2, "tp": 8,
                                                                                                     "ep": 8}}
    working = build_working(parse_plan(plan))
    full = expand_document(working)
    nodes, edges, cursor, pages = [], [], None, 0
    while True:
        page = expand(working, cursor, page_chars=20_000)
        pages += 1
        assert len(json.dumps(page.items, separators=(",", ":"))) <= 20_000
        (nodes if page.part == "nodes" else edges).extend(page.items)
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages > 5 and nodes == full["nodes"] and edges == full["edges"]
    assert page.total_nodes == len(nodes) and page.total_edges == len(edges)


def test_bad_cursor_names_the_field():
    working = build_working(parse_plan({"model": TINY, "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}))
    for bad in ("x" * 10_000, "nodes:-1", "edges:99999999", 7):
        try:
            expand(working, bad)  # type: ignore[arg-type]
        except PdagInputError as exc:
            assert exc.field == "cursor" and len(str(exc)) < 400
        else:
            raise AssertionError(bad)


def _hand_drafted(drawn: int, folded: bool) -> dict:
    """A DAG with ``drawn`` replicas drawn out and, when ``folded``, a replica fold stating the rest of 4."""
    plan = {"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "parallel": {"dp": 4, "tp": 2, "ep": 2}, "objective": "throughput"}
    full = build_full_dag(plan)
    keep = {f"r{i}" for i in range(drawn)}
    doc = copy.deepcopy(full)
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] == "request" or n["id"].split(".")[0] in keep]
    ids = {n["id"] for n in doc["nodes"]}
    doc["edges"] = [e for e in doc["edges"] if e["source"] in ids and e["target"] in ids]
    if folded:
        doc["folds"] = {"replicas": [{"node": f"r{drawn - 1}", "count": 4 - drawn + 1, "stride": 2}]}
    return doc


def test_two_replicas_drawn_and_a_fold_validate_like_all_four_drawn():
    plan = {"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "parallel": {"dp": 4, "tp": 2, "ep": 2}, "objective": "throughput"}
    whole = validate_dag(dag=build_full_dag(plan))
    part = validate_dag(dag=_hand_drafted(2, folded=True))
    assert verdict(part) == verdict(whole) and part.gpus_used == whole.gpus_used == 8
    unfolded = validate_dag(dag=_hand_drafted(2, folded=False))
    assert unfolded.gpus_used == 4


def test_overlapping_replica_fold_is_an_error():
    doc = _hand_drafted(2, folded=True)
    doc["folds"]["replicas"][0]["stride"] = 1
    r = validate_dag(dag=doc)
    assert "DP-INDEPENDENT-REPLICAS" in {v.rule_id for v in r.violations if v.severity == "error"}


EST_PLANS = [
    {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
     "workload": {"batch_size": 8}},
    {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "parallel": {"dp": 4, "pp": 2, "tp": 8,
                                                                                          "ep": 8},
     "workload": {"batch_size": 16}, "objective": "throughput"},
    {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 16}, "parallel": {"attn_dp": 8, "ep": 16},
     "options": {"allow_attention_dp": True}, "workload": {"batch_size": 64}},
    {"model": "gpt-oss-120b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 2, "pp": 2}},
    {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 4},
     "phases": {"prefill": {"sp": 2}}, "workload": {"input_len": 16384}},
    {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 8},
     "phases": {"decode": {"tp": 4, "dp": 2}}, "options": {"disaggregated": True}},
    {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"pp": 2, "tp": 4,
                                                                                             "ep": 4},
     "workload": {"batch_size": 8}},
]


def test_estimates_of_the_folded_dag_equal_those_of_every_layer_drawn(monkeypatch):
    import tools.estimate.core as core
    from tools.core.build import build_graph
    from tools.core.working import WorkingDag

    folded = [core.estimate_performance(p).model_dump() for p in EST_PLANS]
    monkeypatch.setattr(core, "build_working",
                        lambda plan, layout: WorkingDag(build_graph(plan, layout, first_replica_only=True)))
    monkeypatch.setattr(core, "_PREPARED", {})
    drawn = [core.estimate_performance(p).model_dump() for p in EST_PLANS]

    def close(a, b, path=""):
        if isinstance(a, dict):
            assert a.keys() == b.keys(), path
            for k in a:
                close(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                close(x, y, f"{path}[{i}]")
        elif isinstance(a, float):
            assert abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)), (path, a, b)
        elif path.endswith(".node"):
            assert isinstance(a, str) and isinstance(b, str)  # the first node of a folded run may be named apart
        else:
            assert a == b, (path, a, b)

    for f, d in zip(folded, drawn, strict=True):
        close(f, d)


def test_a_submitted_fully_drawn_dag_is_folded_by_replica_after_a_symmetry_check():
    from tools.rules.validate import load_dag

    plan = {"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "parallel": {"dp": 4, "tp": 2, "ep": 2}, "objective": "throughput"}
    full = build_full_dag(plan)
    ctx, _ = load_dag(copy.deepcopy(full))
    assert [(f.node, f.count, f.stride) for f in ctx.replica_folds] == [("r0", 4, 2)]
    assert not any(n.startswith("r3.") for n in ctx.g)
    odd = copy.deepcopy(full)
    moved = next(n for n in odd["nodes"] if n["id"] == "r2.prefill.L0.attn.t1")
    moved["devices"] = [0]  # replica 2 now borrows a GPU of replica 0: it is no copy
    ctx, _ = load_dag(copy.deepcopy(odd))
    assert [(f.node, f.count) for f in ctx.replica_folds] == [("r0", 2)]
    assert "r2.prefill.L0.attn.t1" in ctx.g and "r3.prefill.L0.attn.t1" in ctx.g
    folded = validate_dag(dag=odd)
    with patch("tools.rules.validate.fold_drawn_replicas", lambda g: []):
        drawn = validate_dag(dag=odd)
    assert verdict(folded) == verdict(drawn)
    assert "DP-INDEPENDENT-REPLICAS" in {r for r, s in verdict(folded) if s == "error"}


def test_counts_of_the_working_form_match_its_expansion():
    from tools.core.working import Expansion, full_counts

    for plan in EST_PLANS:
        working = build_working(parse_plan(plan))
        got, want = full_counts(working), Expansion(working).counts()
        assert got[0] == want[0] and got[1] == want[1] and got[3:] == want[3:]
        assert sorted(got[2]) == sorted(want[2])
