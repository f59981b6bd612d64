"""The engine features a plan's estimate assumes, answered once for the estimator and for the export.

The estimator prices MoE token exchange with the engine profile's all-to-all (DeepEP on SGLang and vLLM) and hides
part of it behind a second micro-batch where the profile says the engine can; engines leave both off by default
(SGLang ``--moe-a2a-backend none``, vLLM ``--all2all-backend allgather_reducescatter``, two-batch overlap opt-in).
A command that does not select them runs slower than priced (a Kimi-K2 attention-DP plan launched without
``--enable-two-batch-overlap`` came out ~8 % slower), so ``tools/estimate/costs.py`` prices from this answer and
``tools/engines/launch.py`` writes its flags from the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.core.engine_profile import engine_profile

__all__ = ["EngineFeatures", "engine_features", "moe_tokens_replicated"]


def moe_tokens_replicated(attn_dp: int, tp: int, ep: int) -> bool:
    """Every expert GPU already holds every token of the layer (attention TP spans the EP group, no attention-DP):
    MoE needs no dispatch and its combine is an all-reduce, the engines' default EP path (no all-to-all backend)."""
    return attn_dp == 1 and tp >= ep


@dataclass(frozen=True)
class EngineFeatures:
    """What the estimate of one server (or pool) assumes the engine runs beyond its defaults."""

    moe_alltoall: bool  # MoE tokens move by all-to-all between expert GPUs (attention-DP or EP wider than TP)
    alltoall_flags: tuple[str, ...]  # launch flags selecting the priced all-to-all (empty: the engine's default)
    prefill_node_dedup: bool  # prefill sends a token once per remote node (DeepEP normal / high-throughput kernels)
    ep_overlap_fraction: float  # share of the all-to-all hidden behind the other micro-batch (0: no overlap)
    ep_overlap_flag: str  # launch flag that turns that overlap on ("" when the engine has none)

    def launch_flags(self) -> list[str]:
        """The flags a command needs to run what was priced."""
        if not self.moe_alltoall:
            return []
        flags = list(self.alltoall_flags)
        if self.ep_overlap_fraction > 0 and self.ep_overlap_flag:
            flags.append(self.ep_overlap_flag)
        return flags


def engine_features(plan: Any, eff: dict[str, float], overlap: bool, engine: str | None = None,
                    pool: str | None = None) -> EngineFeatures:
    """The features ``plan`` priced on ``engine`` (default: its own) with efficiency keys ``eff`` and collective
    overlap ``overlap``; ``pool`` is ``prefill`` or ``decode`` for one pool of a disaggregated plan.  An engine that
    picks its all-to-all kernels per server (vLLM) runs the node-deduplicating prefill kernels only in a prefill
    pool; one that picks them per pass (SGLang's DeepEP auto mode) runs them in every prefill."""
    prof = engine_profile(engine or plan.engine)
    a2a = prof.alltoall
    phases = ("prefill", "decode") if pool is None else (pool,)
    exchanged = plan.spec.is_moe and any(
        d.ep > 1 and not moe_tokens_replicated(d.attn_dp, d.tp, d.ep) for d in (plan.degrees(ph) for ph in phases))
    prefill_pool = pool == "prefill" or (pool is None and plan.options.disaggregated)
    per_server = bool(a2a.prefill_pool_launch_flags)
    flags = a2a.prefill_pool_launch_flags if per_server and pool == "prefill" else a2a.launch_flags
    return EngineFeatures(
        moe_alltoall=exchanged,
        alltoall_flags=tuple(flags),
        prefill_node_dedup=eff["alltoall_node_dedup"] >= 0.5 and (prefill_pool or not per_server),
        ep_overlap_fraction=eff["ep_overlap_fraction"] if overlap and exchanged else 0.0,
        ep_overlap_flag=prof.overlap.launch_flag,
    )
