"""The KV hand-off of disaggregated serving: what moves from a prefill replica to a decode replica, and how long.

A request's KV cache (``input_len`` tokens of every layer, sliding-window layers capped at the
window) moves from the prefill replica that computed it to the decode replica that continues it.  The bytes
follow the *decode* side's layout, since every decode GPU must end up with the shard it keeps: GQA/MHA KV heads
split by the decode head shards (replicated once they run out), an MLA latent whole on every decode attention
GPU, ``plan.effective_kv_dtype``; under decode context parallel each decode GPU takes only its ``1/dcp`` token
slice of those copies.  The request lands in one attention-DP group.  Every GPU has its own link
(NVLink inside a node, one NIC per GPU across nodes), so the time is the larger of what one prefill GPU sends
and what one decode GPU receives, over the link between the pools: intra-node when both replicas sit in one
node, else the inter-node network (``Cluster.link_for``).  The transfer of a batch starts after its prefill
pass (layer-by-layer streaming, as NIXL/Mooncake connectors can do, would hide most of it; not assumed).

It lives on the core floor because validation (DISAGG-TRANSFER-LINK) and the estimate must quote one figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from tools.core.hardware import DTYPE_BYTES
from tools.core.layout import Layout, PhaseLayout
from tools.core.plan import Plan


@dataclass(frozen=True)
class KvHandoff:
    bytes_per_request: float  # logical KV of one request (one copy of every head / the latent)
    wire_bytes_per_request: float  # what the decode GPUs receive in all (replicated heads or latent counted)
    send_bytes_per_gpu: float  # per request, the busiest prefill GPU
    recv_bytes_per_gpu: float  # per request, the busiest decode GPU
    seconds_per_batch: float
    link: str


def _prompt_tokens_over_layers(plan: Plan) -> float:
    """Sum over layers of the prompt tokens whose KV a layer keeps (sliding-window layers capped, recurrent layers
    none: they hand over a fixed state instead)."""
    spec, n = plan.spec, plan.workload.input_len
    window = spec.sliding_window or n
    return float(sum(min(n, window) if spec.is_sliding_layer(i) else n for i in range(spec.num_layers)
                     if not spec.is_recurrent_layer(i) and not spec.is_kv_shared(i)))


def _kv_elems_per_shard(plan: Plan, pl: PhaseLayout, layer: int | None = None) -> float:
    spec = plan.spec
    if spec.attention == "mla":
        return float(spec.kv_elements_per_token_per_layer(0))
    kv_heads, head_dim = spec.kv_shape(layer)  # a full-attention layer's own shape (Gemma-4)
    return 2.0 * max(1, ceil(kv_heads / pl.head_shards)) * head_dim


def _wire_kv_elems(plan: Plan, pl: PhaseLayout) -> float:
    """Sum over layers of the prompt tokens a layer keeps times its KV elements per decode shard."""
    spec, n = plan.spec, plan.workload.input_len
    window = spec.sliding_window or n
    return float(sum((min(n, window) if spec.is_sliding_layer(i) else n) * _kv_elems_per_shard(plan, pl, i)
                     for i in range(spec.num_layers) if not spec.is_recurrent_layer(i) and not spec.is_kv_shared(i)))


def kv_handoff(plan: Plan, layout: Layout, eff: dict[str, float], batch: int) -> KvHandoff:
    """Bytes and time of handing the KV of ``batch`` requests from a prefill replica to a decode replica."""
    spec = plan.spec
    kvb = DTYPE_BYTES[plan.effective_kv_dtype]
    pre, dec = layout.phases["prefill"], layout.phases["decode"]
    tokens = _prompt_tokens_over_layers(plan)
    logical = float(spec.kv_bytes(plan.workload.input_len, kvb)) + spec.state_bytes_per_sequence()
    # the indexer's key cache goes whole to every attention GPU (striped by dcp), like MLA's latent; a recurrent
    # state split by heads
    index = tokens * dec.head_shards * spec.indexer_bytes_per_token_per_layer() / dec.dcp
    state = spec.state_bytes_per_sequence()
    wire = dec.head_shards * _wire_kv_elems(plan, dec) / dec.dcp * kvb + index + state
    p_pool, d_pool = layout.pools["prefill"], layout.pools["decode"]
    senders = p_pool.pp * pre.attn_width
    receivers = d_pool.pp * dec.attn_width
    send, recv = wire / senders, wire / receivers
    cluster = plan.cluster
    devices = p_pool.replica_devices(0) + d_pool.replica_devices(0)
    one_node = max(devices) < cluster.num_gpus and len({cluster.node_of(d) for d in devices}) == 1
    link = cluster.accelerator.intra_node if one_node else cluster.accelerator.inter_node
    where = "intra-node" if one_node else "inter-node"
    alpha = link.latency_us * eff["comm_latency_scale"] * 1e-6
    # on a mesh each GPU reaches its counterparts over one link apiece: a sender whose shard goes to k decode GPUs
    # moves it on k links, a receiver fed by k prefill GPUs takes it on k
    send_link = link.for_group(1 + ceil(receivers / senders))
    recv_link = link.for_group(1 + ceil(senders / receivers))
    eff_bw = eff["comm_bandwidth_efficiency"]
    seconds = alpha + batch * max(send / (send_link.bandwidth_bytes_per_s * eff_bw),
                                  recv / (recv_link.bandwidth_bytes_per_s * eff_bw))
    return KvHandoff(logical, wire, send, recv, seconds, f"{link.kind} ({where})")
