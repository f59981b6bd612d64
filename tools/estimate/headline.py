"""The deployment's headline figures (TTFT, TPOT, e2e, throughput, disaggregated pools' rates) from one replica's
phase latencies. Shared by the full estimator and the search's fast path, so both sit above it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tools.core.dag import NodeType
from tools.core.handoff import kv_handoff
from tools.core.layout import Layout
from tools.core.plan import Plan
from tools.estimate.disagg import balanced_split


class Throughput(BaseModel):
    output_tokens_per_s: float = Field(description="whole deployment (all DP replicas), prefill included")
    total_tokens_per_s: float = Field(description="input + output tokens per second, whole deployment")
    output_tokens_per_s_per_gpu: float
    replica_output_tokens_per_s: float = Field(description="one DP replica with its batch")
    decode_tokens_per_s: float = Field(description="deployment, decode steps only (steady state)")
    single_request_tokens_per_s: float = Field(description="output tokens/s seen by one request")




class PoolRate(BaseModel):
    label: str = Field(description="the pool's degrees, e.g. 'DP2 x TP4'")
    replicas: int
    gpus: int
    replica_gpus: int
    batch_size: int = Field(description="sequences per replica")
    latency_ms: float = Field(description="prefill: one pass of the batch; decode: one step (TPOT)")
    requests_per_s: float = Field(description="whole pool")
    requests_per_s_per_replica: float


class KvTransfer(BaseModel):
    bytes_per_request: float = Field(description="KV of one request's prompt, one copy (decode-side format)")
    wire_bytes_per_request: float = Field(description="bytes the decode GPUs receive (replicated shards counted)")
    ms: float = Field(description="hand-off of one prefill batch, after its pass")
    ms_per_request: float
    link: str




_FULL_BATCH = frozenset({NodeType.ALL_TO_ALL, NodeType.EXPERT, NodeType.MOE})


def node_batch(attrs: dict[str, Any], batch: int, groups: int) -> int:
    """Sequences a node works on: with attention-DP, one group's share (rounded up) for everything but the
    MoE exchange and the experts, which see every group's tokens."""
    if groups > 1 and attrs["type"] not in _FULL_BATCH:
        return -(-batch // groups)
    return batch




class Headline(BaseModel):
    """The deployment-level figures derived from the two phase latencies (shared with the search's fast path)."""

    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    tpot_with_prefill_ms: float
    gpus: int
    throughput: Throughput
    pools: dict[str, PoolRate] | None = None
    kv_transfer: KvTransfer | None = None
    pool_balance: float | None = None
    balanced_prefill_per_decode: float | None = None
    balanced_split: dict[str, int] | None = None


def pool_label(dp: int, pp: int, tp: int, ep: int, attn_dp: int = 1, sp: int = 1) -> str:
    """Compact degrees of one pool or replica, e.g. 'DP2 x TP4 EP8' or 'ADP8 EP8'."""
    parts = [f"{n}{v}" for n, v in (("DP", dp), ("PP", pp), ("ADP", attn_dp), ("TP", tp)) if v > 1]
    core = " x ".join(parts) if parts else ("TP1" if ep > 1 else "1 GPU")
    if ep > 1:
        core += f" EP{ep}"
    if sp > 1:
        core += f" SP{sp}"
    return core


def headline(plan: Plan, layout: Layout, eff: dict[str, float], prefill_ms: float, tpot_ms: float,
             replica_gpus: int, batch: int | None = None, num_gpus: int | None = None) -> Headline:
    """TTFT, TPOT, e2e and throughput of the deployment from one replica's phase latencies (see module doc);
    ``batch`` and ``num_gpus`` default to the plan's."""
    wl = plan.workload
    b, out_len = batch or wl.batch_size, wl.output_len
    in_out = (wl.input_len + wl.output_len) / out_len
    if not layout.disaggregated:
        dp = layout.dp
        e2e = prefill_ms + out_len * tpot_ms
        out_rep = b * out_len / (e2e / 1e3)
        gpus = replica_gpus * dp
        thr = Throughput(
            output_tokens_per_s=out_rep * dp, total_tokens_per_s=out_rep * dp * in_out,
            output_tokens_per_s_per_gpu=out_rep * dp / gpus, replica_output_tokens_per_s=out_rep,
            decode_tokens_per_s=dp * b / (tpot_ms / 1e3), single_request_tokens_per_s=out_len / (e2e / 1e3),
        )
        return Headline(ttft_ms=prefill_ms, tpot_ms=tpot_ms, e2e_ms=e2e, tpot_with_prefill_ms=e2e / out_len,
                        gpus=gpus, throughput=thr)
    p_pool, d_pool = layout.pools["prefill"], layout.pools["decode"]
    pre, dec = layout.phases["prefill"], layout.phases["decode"]
    hand = kv_handoff(plan, layout, eff, b)
    ttft = prefill_ms + hand.seconds_per_batch * 1e3
    e2e = ttft + out_len * tpot_ms
    r_p = b / max(prefill_ms / 1e3, hand.seconds_per_batch)  # requests/s of one prefill replica
    r_d = b / (out_len * tpot_ms / 1e3)
    rate = min(p_pool.dp * r_p, d_pool.dp * r_d)
    gpus = layout.gpus_needed
    out = rate * out_len
    pools = {
        "prefill": PoolRate(label=pool_label(p_pool.dp, pre.pp, pre.tp, pre.ep if plan.spec.is_moe else 1,
                                             pre.attn_dp, pre.sp),
                            replicas=p_pool.dp, gpus=p_pool.gpus, replica_gpus=p_pool.replica_gpus, batch_size=b,
                            latency_ms=prefill_ms, requests_per_s=p_pool.dp * r_p, requests_per_s_per_replica=r_p),
        "decode": PoolRate(label=pool_label(d_pool.dp, dec.pp, dec.tp, dec.ep if plan.spec.is_moe else 1,
                                            dec.attn_dp, dec.sp),
                           replicas=d_pool.dp, gpus=d_pool.gpus, replica_gpus=d_pool.replica_gpus, batch_size=b,
                           latency_ms=tpot_ms, requests_per_s=d_pool.dp * r_d, requests_per_s_per_replica=r_d),
    }
    n_p, n_d = balanced_split(r_p, p_pool.replica_gpus, r_d, d_pool.replica_gpus,
                              num_gpus or plan.hardware.num_gpus)
    thr = Throughput(
        output_tokens_per_s=out, total_tokens_per_s=out * in_out, output_tokens_per_s_per_gpu=out / gpus,
        replica_output_tokens_per_s=r_d * out_len, decode_tokens_per_s=d_pool.dp * b / (tpot_ms / 1e3),
        single_request_tokens_per_s=out_len / (e2e / 1e3),
    )
    return Headline(
        ttft_ms=ttft, tpot_ms=tpot_ms, e2e_ms=e2e, tpot_with_prefill_ms=tpot_ms, gpus=gpus, throughput=thr,
        pools=pools,
        kv_transfer=KvTransfer(bytes_per_request=hand.bytes_per_request,
                               wire_bytes_per_request=hand.wire_bytes_per_request,
                               ms=hand.seconds_per_batch * 1e3, ms_per_request=hand.seconds_per_batch * 1e3 / b,
                               link=hand.link),
        pool_balance=(p_pool.dp * r_p) / (d_pool.dp * r_d), balanced_prefill_per_decode=r_d / r_p,
        balanced_split={"prefill_replicas": n_p, "decode_replicas": n_d,
                        "gpus": n_p * p_pool.replica_gpus + n_d * d_pool.replica_gpus} if n_p else None,
    )


