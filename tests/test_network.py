"""The scale-out fabric: rails, leaf groups and the spine decide which link a collective across NVLink domains
crosses (knowledge/hardware/network.json); the estimate prices all-to-all and PP hand-offs on that link."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import estimate_performance, validate_dag
from tools.core.errors import PdagInputError
from tools.core.hardware import Cluster, Network, load_accelerator
from tools.core.plan import parse_plan

H100 = load_accelerator("h100-sxm")


def cluster(gpus: int, **net) -> Cluster:
    return Cluster(accelerator=H100, num_gpus=gpus, gpus_per_node=8, network=Network(**net))


def test_inside_a_node_is_nvlink_and_one_leaf_is_the_plain_network_link():
    c = cluster(512)
    assert c.link_for([0, 7]) == H100.intra_node
    assert c.link_for([0, 8, 16]) == H100.inter_node  # same rail (local rank 0), nodes 0-2 under one rail leaf


def test_a_peer_on_another_rail_costs_one_nvlink_hop_not_a_spine_round_trip():
    c = cluster(512)
    link = c.link_for([0, 9])  # local ranks 0 and 1 on nodes 0 and 1
    assert link.bandwidth_bytes_per_s == H100.inter_node.bandwidth_bytes_per_s
    assert link.latency_us == pytest.approx(H100.inter_node.latency_us + H100.intra_node.latency_us)


def test_leaving_the_leaf_group_crosses_the_spine_and_shares_its_uplinks():
    c = cluster(1024, spine_oversubscription=2.0)
    per_leaf = c.nodes_per_leaf  # 32 nodes on rails
    inside = c.link_for([0, 8 * (per_leaf - 1)])
    across = c.link_for([0, 8 * per_leaf])
    assert inside == H100.inter_node
    assert across.bandwidth_bytes_per_s == pytest.approx(H100.inter_node.bandwidth_bytes_per_s / 2)
    assert across.latency_us == pytest.approx(H100.inter_node.latency_us + 2 * c.network.switch_latency_us)


def test_without_rails_a_leaf_holds_whole_nodes_and_fewer_of_them():
    rails, tor = cluster(256), cluster(256, rails=False)
    assert rails.nodes_per_leaf == 32 and tor.nodes_per_leaf == 4
    assert tor.link_for([0, 9]) == H100.inter_node  # same top-of-rack leaf: no NVLink forwarding needed
    assert tor.link_for([0, 8 * 4]).latency_us > rails.link_for([0, 8 * 4]).latency_us


@settings(max_examples=60, deadline=None)
@given(a=st.integers(0, 2047), b=st.integers(0, 2047), over=st.floats(1, 8), rails=st.booleans())
def test_a_link_is_never_faster_than_the_plain_network_once_it_leaves_the_domain(a, b, over, rails):
    c = cluster(2048, spine_oversubscription=over, rails=rails)
    link = c.link_for([a, b])
    if c.domain_of(a) == c.domain_of(b):
        assert link == H100.intra_node
    else:
        assert link.bandwidth_bytes_per_s <= H100.inter_node.bandwidth_bytes_per_s
        assert link.latency_us >= H100.inter_node.latency_us


def _wide_ep(**network) -> dict:
    plan = {"model": "deepseek-v3", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 256},
            "parallel": {"attn_dp": 32, "tp": 8, "ep": 256}, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2048, "output_len": 256, "batch_size": 64}}
    if network:
        plan["hardware"]["network"] = network
    return plan


def test_wide_ep_beyond_one_leaf_group_slows_down_on_an_oversubscribed_spine():
    base = estimate_performance(plan=_wide_ep())
    small_leaves = estimate_performance(plan=_wide_ep(leaf_downlink_ports=8, spine_oversubscription=4.0))
    assert small_leaves.decode_latency_ms_per_token > base.decode_latency_ms_per_token
    assert small_leaves.prefill_latency_ms > base.prefill_latency_ms
    same = estimate_performance(plan=_wide_ep(spine_oversubscription=4.0))  # 32 nodes fit one rail leaf group
    assert same.decode_latency_ms_per_token == base.decode_latency_ms_per_token
    assert validate_dag(plan=_wide_ep(rails=False)).valid


def test_bad_network_fields_are_named():
    with pytest.raises(PdagInputError) as err:
        parse_plan(_wide_ep(spine_oversubscription=0.5))
    assert "hardware.network.spine_oversubscription" in str(err.value)


MI300X = load_accelerator("mi300x")


def test_an_xgmi_mesh_gives_a_small_group_only_its_own_links():
    """MI300X's eight GPUs are a full mesh of single 64 GB/s links (AMD's RCCL/xGMI blog): TP2 talks over one link
    of seven, TP8 over all seven; NVLink's switch gives every group the whole bandwidth."""
    c = Cluster(accelerator=MI300X, num_gpus=8, gpus_per_node=8)
    full = MI300X.intra_node.bandwidth_bytes_per_s
    assert c.link_for([0, 1]).bandwidth_bytes_per_s == pytest.approx(64e9)
    assert c.link_for([0, 1, 2, 3]).bandwidth_bytes_per_s == pytest.approx(3 / 7 * full)
    assert c.link_for(list(range(8))).bandwidth_bytes_per_s == pytest.approx(full)
    assert cluster(8).link_for([0, 1]) == H100.intra_node


def test_tp2_prefill_on_an_xgmi_mesh_waits_longer_on_its_all_reduce_than_on_nvlink():
    def comm_ms(gpu: str) -> float:
        est = estimate_performance(plan={"model": "llama-3.1-70b", "hardware": {"gpu": gpu, "num_gpus": 2},
                                         "parallel": {"tp": 2}, "dtype": "fp8",
                                         "workload": {"input_len": 4096, "output_len": 16, "batch_size": 1}})
        return est.prefill.communication_ms
    assert comm_ms("mi300x") > 4 * comm_ms("h100-sxm")


@given(st.integers(min_value=2, max_value=8), st.integers(min_value=2, max_value=8))
@settings(max_examples=40, deadline=None)
def test_a_wider_group_on_a_mesh_never_gets_less_bandwidth(a, b):
    c = Cluster(accelerator=MI300X, num_gpus=8, gpus_per_node=8)
    lo, hi = sorted((a, b))
    assert c.link_for(list(range(lo))).bandwidth_bytes_per_s <= c.link_for(list(range(hi))).bandwidth_bytes_per_s


def test_a_kv_hand_off_inside_an_xgmi_mesh_uses_only_the_links_between_the_pools():
    """Prefill TP2 hands each request's KV to decode TP2 on the same node: each prefill GPU reaches its one decode
    counterpart over one 64 GB/s link, not the node's 448 GB/s; on an NVLink switch the pair gets the full link."""
    def hand_off_ms(gpu: str) -> float:
        est = estimate_performance(plan={
            "model": "llama-3.1-70b", "hardware": {"gpu": gpu, "num_gpus": 4}, "dtype": "fp8",
            "parallel": {"tp": 2}, "phases": {"decode": {"tp": 2}}, "options": {"disaggregated": True},
            "workload": {"input_len": 4096, "output_len": 64, "batch_size": 4}})
        assert est.kv_transfer is not None and "intra-node" in est.kv_transfer.link
        return est.kv_transfer.ms
    mesh, switch = hand_off_ms("mi300x"), hand_off_ms("h100-sxm")
    assert mesh > 5 * switch
