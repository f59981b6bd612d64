"""Disaggregated prefill/decode: the KV hand-off between the pools, each pool's rate and their balance.

KV hand-off.  A request's KV cache (``input_len`` tokens of every layer, sliding-window layers capped at the
window) moves from the prefill replica that computed it to the decode replica that continues it.  The bytes
follow the *decode* side's layout, since every decode GPU must end up with the shard it keeps: GQA/MHA KV heads
split by the decode head shards (replicated once they run out), an MLA latent whole on every decode attention
GPU, ``plan.effective_kv_dtype``; under decode context parallel each decode GPU takes only its ``1/dcp`` token
slice of those copies.  The request lands in one attention-DP group.  Every GPU has its own link
(NVLink inside a node, one NIC per GPU across nodes), so the time is the larger of what one prefill GPU sends
and what one decode GPU receives, over the link between the pools: intra-node when both replicas sit in one
node, else the inter-node network (``Cluster.link_for``).  The transfer of a batch starts after its prefill
pass (layer-by-layer streaming, as NIXL/Mooncake connectors can do, would hide most of it; not assumed).

Rates.  A prefill replica turns out ``batch`` requests per pass, a new pass every
``max(prefill latency, transfer time)`` (the hand-off of one batch overlaps the next pass); a decode replica
finishes ``batch`` requests every ``output_len`` decode steps.  The deployment's request rate is the smaller
of the two pools' rates; ``pool_balance = prefill rate / decode rate`` (1 = balanced) and the replica ratio
that would balance them is ``decode replica rate / prefill replica rate`` prefill replicas per decode replica.
"""

from __future__ import annotations

import math
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


def _fewest(most: int, rate: float, target: float) -> int:
    """Fewest replicas in 1..most whose rate reaches ``target`` (extra ones would idle); ``most`` when none does.
    Closed form, then a step either way for rounding: the pool split runs this once per prefill count."""
    if most * rate < target:
        return most
    n = max(1, min(most, math.ceil(target / rate))) if rate > 0 else 1
    while n > 1 and (n - 1) * rate >= target:
        n -= 1
    while n < most and n * rate < target:
        n += 1
    return n


def balanced_split(rate_p: float, gpus_p: int, rate_d: float, gpus_d: int, gpus: int) -> tuple[int, int]:
    """(prefill replicas, decode replicas) within ``gpus`` GPUs that maximise min(prefill rate, decode rate);
    ties: fewer GPUs.  (0, 0) when one replica of each does not fit."""
    best: tuple[float, int, int, int] | None = None
    for n_p in range(1, gpus // gpus_p + 1):
        n_d = (gpus - n_p * gpus_p) // gpus_d
        if n_d < 1:
            break
        n_d = _fewest(n_d, rate_d, n_p * rate_p)
        rate = min(n_p * rate_p, n_d * rate_d)
        used = n_p * gpus_p + n_d * gpus_d
        key = (-rate, used, n_p, n_d)
        if best is None or key < best:
            best = key
    return (best[2], best[3]) if best else (0, 0)
