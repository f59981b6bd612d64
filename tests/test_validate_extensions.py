"""validate_dag on the opt-in strategies beyond the seeds: attention-DP and disaggregated prefill/decode.

Valid deployments validate with no error (as plans and as full DAGs); without their opt-in the seeds' rules
still reject them; the existing checkers learn the opt-ins without false positives."""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.generate import ADP_DSV3, DIS_70B, P_ADP, P_DIS, VALID_EXTENSIONS, without
from tools import build_dag, validate_dag
from tools.rules.validate import load_dag


def rules(result) -> set[str]:
    return {v.rule_id for v in result.violations}


def errors(result) -> list[str]:
    return [f"{v.rule_id}: {v.message}" for v in result.violations if v.severity == "error"]


@pytest.mark.parametrize("name", sorted(VALID_EXTENSIONS))
def test_valid_extension_plans_and_dags_have_no_error(name: str):
    plan = VALID_EXTENSIONS[name]
    r = validate_dag(plan=plan)
    assert r.valid, errors(r)
    assert not [n for n in r.notes if " failed: " in n], r.notes
    d = validate_dag(dag=build_dag(plan).dag)
    assert d.valid, errors(d)
    assert r.gpus_used == d.gpus_used == plan["hardware"]["num_gpus"]


@pytest.mark.parametrize("plan", [ADP_DSV3, P_ADP], ids=["deepseek-v3", "tiny-moe"])
def test_attention_dp_without_opt_in_is_rejected_by_the_seeds_dp_rules(plan):
    for kind in ("plan", "dag"):
        bare = without(plan, "allow_attention_dp")
        r = validate_dag(**{kind: bare if kind == "plan" else build_dag(bare).dag})
        assert {"ADP-OPT-IN", "DP-ROOT-ONLY", "DP-NO-LAYER-SPLIT"} <= rules(r), kind
        assert not r.valid


def test_attention_dp_opt_in_silences_the_dp_rules_only_for_attention_groups():
    r = validate_dag(dag=build_dag(P_ADP).dag)
    assert not {"DP-ROOT-ONLY", "DP-NO-LAYER-SPLIT", "DECODE-SINGLE-TOKEN", "EP-NOT-INSIDE-TP",
                "COMM-NO-IMPLICIT"} & rules(r)
    # a real replica under a stage is still DP inside the graph, opt-in or not
    dag = build_dag(P_ADP).dag
    dag["nodes"].append({"id": "rX", "type": "ReplicaNode", "devices": [0]})
    dag["edges"].append({"source": "r0.prefill.s0", "target": "rX", "type": "data"})
    assert "DP-ROOT-ONLY" in rules(validate_dag(dag=dag))


def test_hand_dag_keeps_attn_group():
    ctx, _ = load_dag(build_dag(P_ADP).dag)
    assert ctx.attr("r0.decode.L0.attn.g2.t0", "attn_group") == 2


def test_dense_attention_dp_is_rejected():
    dense = copy.deepcopy(without(P_DIS, "disaggregated"))  # the tiny dense model
    dense.pop("phases")
    dense["parallel"] = {"attn_dp": 2, "tp": 2}
    dense["options"] = {"allow_attention_dp": True}
    assert "ADP-MOE-ONLY" in rules(validate_dag(plan=dense))


def test_disaggregated_without_opt_in_keeps_the_shared_layout_rules():
    r = validate_dag(plan=without(DIS_70B, "disaggregated"))
    assert {"DISAGG-OPT-IN", "PHASE-SHARED-WEIGHT-LAYOUT", "COMBO-DP-OUTER"} <= rules(r)
    ok = validate_dag(plan=DIS_70B)
    assert not {"DISAGG-OPT-IN", "PHASE-SHARED-WEIGHT-LAYOUT", "COMBO-DP-OUTER"} & rules(ok)


def test_full_disaggregated_dag_has_no_false_positives():
    r = validate_dag(dag=build_dag(DIS_70B).dag)
    assert not {"DP-INDEPENDENT-REPLICAS", "PHASE-PREFILL-DECODE-SPLIT", "KV-DP-PER-REPLICA",
                "DECODE-KV-DEPENDENCY", "GPU-FROM-DEVICES"} & rules(r)
    assert r.gpus_used == 16


def test_disaggregated_dag_without_opt_in_is_rejected():
    dag = build_dag(P_DIS).dag
    dag["plan"] = without(P_DIS, "disaggregated")
    assert {"DISAGG-OPT-IN", "PHASE-PREFILL-DECODE-SPLIT"} <= rules(validate_dag(dag=dag))


def test_transfer_link_states_bytes_per_request():
    r = validate_dag(plan=DIS_70B)
    v = next(v for v in r.violations if v.rule_id == "DISAGG-TRANSFER-LINK")
    assert v.severity == "warning"
    # llama-3.1-70b: 80 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 327.7 kB per token
    assert "327.7 kB per token" in v.message and "2048" in v.message and "0.671 GB" in v.message
    fp8 = validate_dag(plan={**DIS_70B, "kv_dtype": "fp8"})
    assert "163.8 kB" in next(v.message for v in fp8.violations if v.rule_id == "DISAGG-TRANSFER-LINK")


def test_direct_kv_edge_between_pools_is_rejected():
    dag = build_dag(P_DIS).dag
    dag["edges"].append({"source": "p0.prefill.L0.kv.t0", "target": "d0.decode.L0.kv.t0", "type": "kv"})
    assert "DISAGG-KV-TRANSFER" in rules(validate_dag(dag=dag))


def test_collectives_of_a_decode_pool_inside_one_node_are_not_flagged_as_cross_node():
    """Each pool's replicas are shifted by that pool's own width, not the prefill pool's."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 4},
            "phases": {"prefill": {"dp": 2, "tp": 2}}, "options": {"disaggregated": True}}
    ids = {v.rule_id for v in validate_dag(plan=plan).violations}
    assert "HW-INTERCONNECT-COST" not in ids
    crossing = {**plan, "hardware": {"gpu": "h200", "num_gpus": 8, "gpus_per_node": 2}}
    assert "HW-INTERCONNECT-COST" in {v.rule_id for v in validate_dag(plan=crossing).violations}


def test_an_nvl72_rack_is_one_nvlink_domain_for_the_interconnect_rule():
    """Wide EP inside a GB200 NVL72 rack stays on NVLink (the estimator prices it so); two racks do not."""
    def plan(n: int) -> dict:
        return {"model": "deepseek-v3", "hardware": {"gpu": "gb200", "num_gpus": n}, "dtype": "fp8",
                "parallel": {"tp": 1, "ep": n}}
    assert "HW-INTERCONNECT-COST" not in {v.rule_id for v in validate_dag(plan=plan(48)).violations}
    assert "HW-INTERCONNECT-COST" in {v.rule_id for v in validate_dag(plan=plan(144)).violations}


def test_transfer_link_quotes_the_estimates_hand_off():
    """Validation said 0.72 ms per request (the logical KV over all 8 GPUs' NICs) where the estimate said 7.68 ms
    (what the decode attention group receives, MLA's latent on each of its GPUs): one function now prices both."""
    from tools.estimate.core import estimate_performance

    plan = {"model": "deepseek-r1", "hardware": {"gpu": "h200", "num_gpus": 16, "gpus_per_node": 8},
            "workload": {"input_len": 4096, "output_len": 1024, "batch_size": 64}, "engine": "sglang",
            "parallel": {"tp": 4, "ep": 8, "attn_dp": 2}, "phases": {"decode": {"tp": 2, "ep": 8, "attn_dp": 4}},
            "options": {"allow_attention_dp": True, "disaggregated": True}}
    msg = next(v.message for v in validate_dag(plan=plan).violations if v.rule_id == "DISAGG-TRANSFER-LINK")
    kv = estimate_performance(plan).kv_transfer
    quoted = float(msg.split(" ms per request")[0].rsplit("about ", 1)[1])
    assert abs(quoted - kv.ms_per_request) <= 0.05 * kv.ms_per_request
    assert f"{kv.wire_bytes_per_request / 1e9:.3f} GB on the wire" in msg


def test_a_plan_with_an_odd_tp_gets_the_divisibility_error_not_a_drafted_dag_finding():
    """pdag built the DAG from the plan: a fractional shard is TP-HEADS-DIVISIBLE's finding, and STRUCT-SHARD-SIZES'
    hint about stating a hand-drafted node's sizes does not apply."""
    ids = rules(validate_dag(plan={"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
                                   "parallel": {"tp": 3}}))
    assert "TP-HEADS-DIVISIBLE" in ids and "STRUCT-SHARD-SIZES" not in ids


def test_an_engine_context_cap_beyond_the_models_window_is_refused():
    plan = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 4}, "parallel": {"tp": 4, "ep": 4},
            "weights": "fp8", "engine": "vllm", "engine_options": {"max_model_len": 131072}}
    res = validate_dag(plan=plan)
    v = next(v for v in res.violations if v.rule_id == "KV-CONTEXT-WITHIN-MODEL")
    assert v.severity == "error" and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in v.message
    within = {**plan, "engine_options": {"max_model_len": 40960}}
    assert "KV-CONTEXT-WITHIN-MODEL" not in rules(validate_dag(plan=within))
