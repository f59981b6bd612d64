"""autofix_dag: repairs with reasons, residue explained, idempotent, never makes a valid plan invalid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import autofix_dag, build_dag, validate_dag
from tools.core.errors import PdagInputError

CORPUS = sorted((Path(__file__).resolve().parent / "fixtures" / "corpus").glob("*.json"))


def _input(path: Path) -> tuple[str, dict]:
    item = json.loads(path.read_text())
    return next(iter(item["input"].items()))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_fixed_or_explained_and_idempotent(path: Path):
    kind, value = _input(path)
    r = autofix_dag(**{kind: value})
    assert not [n for n in r.notes if " failed: " in n], r.notes
    for c in r.changes:
        assert c.rule_id and c.message
    if r.valid:
        assert not [v for v in r.violations if v.severity == "error"]
        if r.plan is not None:
            assert validate_dag(plan=r.plan).valid
    else:
        assert all(v.reason for v in r.violations if v.severity == "error")
    if r.plan is not None and kind == "plan":
        again = autofix_dag(plan=r.plan)
        assert again.changes == [], [c.message for c in again.changes]


def test_mechanical_multiplication_is_repaired_by_the_derived_count():
    r = autofix_dag(plan={"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 64},
                          "parallel": {"tp": 8, "ep": 8}})
    assert r.valid and r.plan["hardware"]["num_gpus"] == 8
    c = next(c for c in r.changes if c.rule_id == "GPU-NO-MULTIPLICATION")
    assert (c.before, c.after, c.field) == (64, 8, "plan.hardware.num_gpus")


def test_memory_repair_prefers_tp_within_a_node_for_latency():
    r = autofix_dag(plan={"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
                          "objective": "latency"})
    assert r.valid
    assert r.plan["parallel"].get("pp", 1) == 1 and r.plan["parallel"]["tp"] in (2, 4, 8)
    assert any(c.rule_id == "MEM-FITS" for c in r.changes)


def test_unfixable_memory_says_how_many_gpus():
    r = autofix_dag(plan={"model": "llama-3.1-405b", "hardware": {"gpu": "l40s", "num_gpus": 8}})
    assert not r.valid
    v = next(v for v in r.violations if v.rule_id == "MEM-FITS")
    assert "needs at least" in v.reason and "L40S" in v.reason


def test_valid_plan_unchanged():
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8}}
    r = autofix_dag(plan=plan)
    assert r.valid and r.changes == [] and r.plan == plan


def test_dag_with_plan_is_rebuilt():
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
    dag = build_dag(plan).dag
    dag["edges"] = [e for e in dag["edges"] if e["target"] != "r0.prefill.L0.attn.allreduce"]
    assert not validate_dag(dag=dag).valid
    r = autofix_dag(dag=dag)
    assert r.valid and r.dag is not None and validate_dag(dag=r.dag).valid
    assert any(c.field == "dag" for c in r.changes)


def test_plan_less_dag_without_model_is_explained():
    dag = {"nodes": [{"id": "req", "type": "RequestNode", "devices": [0]}, {"id": "x", "type": "AttentionNode",
                                                                              "devices": [0]}], "edges": []}
    r = autofix_dag(dag=dag)
    assert not r.valid and "model" in r.violations[0].reason


def test_bad_input_raises():
    with pytest.raises(PdagInputError):
        autofix_dag(plan=[1, 2])
    with pytest.raises(PdagInputError):
        autofix_dag(dag=None, plan=None)
