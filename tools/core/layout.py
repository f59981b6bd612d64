"""Where every shard runs: the one place pdag derives GPU ids (never from a product of all degrees).

A replica's pipeline stage owns a *stage group* of ``W = max(attn_dp * max(tp, sp), ep)`` GPUs (see
ARCHITECTURE.md): TP uses the first ``tp`` of them, the experts of a MoE layer the first ``ep``, attention with
SP re-partitions the TP GPUs into head shards x sequence shards, and the opt-in attention-DP splits the group
into ``attn_dp`` attention groups.  Replicas and stages are laid out contiguously, so that a stage group stays
inside one node whenever it fits in one.

In aggregated serving both phases run on one *pool* of GPUs (the weights are resident once).  With the
opt-in disaggregated serving, prefill and decode get pools of their own: prefill GPUs first, then decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tools.core.plan import PHASES, Phase, Plan


@dataclass(frozen=True)
class PhaseLayout:
    """Degrees of one phase, with the derived shard grid of attention."""

    phase: Phase
    dp: int
    pp: int
    tp: int
    ep: int
    sp: int
    attn_dp: int = 1
    dcp: int = 1  # decode context parallel: KV striped by token over dcp ranks of the TP group (decode only)

    @property
    def attn_width(self) -> int:
        """GPUs one attention group spans: SP re-partitions the TP GPUs, it never adds any."""
        return max(self.tp, self.sp)

    @property
    def head_shards(self) -> int:
        return max(1, self.attn_width // self.sp)

    @property
    def attention_gpus(self) -> int:
        """GPUs holding token activations: every attention group of the stage."""
        return self.attn_dp * self.attn_width


@dataclass(frozen=True)
class Pool:
    """A set of GPUs running replicas of one layout: both phases (aggregated) or one phase (disaggregated)."""

    dp: int
    pp: int
    group_width: int
    offset: int
    layer_split: tuple[int, ...]
    num_layers: int

    @property
    def replica_gpus(self) -> int:
        return self.pp * self.group_width

    @property
    def gpus(self) -> int:
        return self.dp * self.replica_gpus

    def device(self, replica: int, stage: int, local: int) -> int:
        return self.offset + replica * self.replica_gpus + stage * self.group_width + local

    def devices(self, replica: int, stage: int, start: int, count: int) -> list[int]:
        """``count`` consecutive GPUs of a stage group, from its local index ``start``."""
        base = self.device(replica, stage, start)
        return list(range(base, base + count))

    def stage_devices(self, replica: int, stage: int) -> list[int]:
        return self.devices(replica, stage, 0, self.group_width)

    def replica_devices(self, replica: int) -> list[int]:
        base = self.offset + replica * self.replica_gpus
        return list(range(base, base + self.replica_gpus))

    @cached_property
    def stage_layers(self) -> list[range]:
        """One contiguous layer range per stage, clipped to the model's layers (a bad split shows as gaps)."""
        out, start = [], 0
        split = list(self.layer_split[: self.pp]) + [0] * max(0, self.pp - len(self.layer_split))
        for count in split:
            stop = min(start + count, self.num_layers)
            out.append(range(min(start, self.num_layers), stop))
            start += count
        return out


def even_split(layers: int, pp: int) -> tuple[int, ...]:
    """As even as possible; the first ``layers % pp`` stages take one extra layer."""
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


@dataclass(frozen=True)
class Layout:
    plan: Plan

    @cached_property
    def phases(self) -> dict[Phase, PhaseLayout]:
        out: dict[Phase, PhaseLayout] = {}
        for phase in PHASES:
            d = self.plan.degrees(phase)
            out[phase] = PhaseLayout(phase, d.dp, d.pp, d.tp, d.ep, d.sp, d.attn_dp, d.dcp if phase == "decode" else 1)
        return out

    @property
    def disaggregated(self) -> bool:
        return self.plan.options.disaggregated

    def _width(self, phases: list[PhaseLayout]) -> int:
        ep_used = self.plan.spec.is_moe
        return max(max(p.attention_gpus, p.sp, p.ep if ep_used else 1) for p in phases)

    def _split(self, pp: int) -> tuple[int, ...]:
        explicit = self.plan.options.layer_split
        if explicit is not None and (not self.disaggregated or len(explicit) == pp):
            return tuple(explicit)
        return even_split(self.plan.spec.num_layers, pp)

    @cached_property
    def pools(self) -> dict[Phase, Pool]:
        layers = self.plan.spec.num_layers
        if not self.disaggregated:
            phases = list(self.phases.values())
            pp = max(p.pp for p in phases)
            shared = Pool(max(p.dp for p in phases), pp, self._width(phases), 0, self._split(pp), layers)
            return dict.fromkeys(PHASES, shared)
        pre, dec = self.phases["prefill"], self.phases["decode"]
        p_pool = Pool(pre.dp, pre.pp, self._width([pre]), 0, self._split(pre.pp), layers)
        d_pool = Pool(dec.dp, dec.pp, self._width([dec]), p_pool.gpus, self._split(dec.pp), layers)
        return {"prefill": p_pool, "decode": d_pool}

    @cached_property
    def gpus_needed(self) -> int:
        return sum({id(p): p.gpus for p in self.pools.values()}.values())

    # Aggregated-serving shortcuts (the prefill pool is the only pool then).
    @property
    def dp(self) -> int:
        return self.pools["prefill"].dp

    @property
    def pp(self) -> int:
        return self.pools["prefill"].pp

    @property
    def group_width(self) -> int:
        """GPUs per pipeline stage of one replica (W): the widest operator of any phase."""
        return self.pools["prefill"].group_width

    @property
    def replica_gpus(self) -> int:
        return self.pools["prefill"].replica_gpus

    @property
    def layer_split(self) -> list[int]:
        return list(self.pools["prefill"].layer_split)

    @property
    def stage_layers(self) -> list[range]:
        return self.pools["prefill"].stage_layers

    def device(self, replica: int, stage: int, local: int) -> int:
        return self.pools["prefill"].device(replica, stage, local)

    def stage_devices(self, replica: int, stage: int) -> list[int]:
        return self.pools["prefill"].stage_devices(replica, stage)

    def replica_devices(self, replica: int) -> list[int]:
        return self.pools["prefill"].replica_devices(replica)


def nominal_product(plan: Plan) -> int:
    """The mechanically multiplied GPU count an agent might wrongly claim (dp*pp*tp*ep*sp)."""
    d = plan.parallel
    return d.dp * d.pp * d.tp * d.ep * d.sp * d.attn_dp


def vocab_shards(plan: Plan, pl: PhaseLayout) -> int:
    """Ranks the embedding table and LM head are split over by vocabulary: the TP group, where the plan's engine
    does so (profile kernel ``vocab_parallel``: vLLM, SGLang, TensorRT-LLM; not gpt-fast). Attention-DP groups
    and SP beyond TP keep them whole."""
    from tools.core.engine_profile import engine_profile

    if "vocab_parallel" not in engine_profile(plan.engine).kernels:
        return 1
    return pl.tp if pl.attn_dp == 1 and pl.tp > 1 and pl.sp <= pl.tp else 1
