"""Where every shard runs: the one place pdag derives GPU ids (never from a product of all degrees).

A replica's pipeline stage owns a *stage group* of ``W = max(tp, sp, ep)`` GPUs (see ARCHITECTURE.md):
TP uses the first ``tp`` of them, the experts of a MoE layer the first ``ep``, attention with SP re-partitions
the TP GPUs into head shards x sequence shards.  Replicas and stages are laid out contiguously, so that a
stage group stays inside one node whenever it fits in one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tools.plan import PHASES, Phase, Plan


@dataclass(frozen=True)
class PhaseLayout:
    """Degrees of one phase, with the derived shard grid of attention."""

    phase: Phase
    dp: int
    pp: int
    tp: int
    ep: int
    sp: int

    @property
    def attn_width(self) -> int:
        """GPUs the attention operator spans: SP re-partitions the TP GPUs, it never adds any."""
        return max(self.tp, self.sp)

    @property
    def head_shards(self) -> int:
        return max(1, self.attn_width // self.sp)


@dataclass(frozen=True)
class Layout:
    plan: Plan

    @cached_property
    def phases(self) -> dict[Phase, PhaseLayout]:
        out: dict[Phase, PhaseLayout] = {}
        for phase in PHASES:
            d = self.plan.degrees(phase)
            out[phase] = PhaseLayout(phase, d.dp, d.pp, d.tp, d.ep, d.sp)
        return out

    @cached_property
    def dp(self) -> int:
        return max(p.dp for p in self.phases.values())

    @cached_property
    def pp(self) -> int:
        return max(p.pp for p in self.phases.values())

    @cached_property
    def group_width(self) -> int:
        """GPUs per pipeline stage of one replica (W): the widest operator of any phase."""
        ep_used = self.plan.spec.is_moe
        return max(max(p.tp, p.sp, p.ep if ep_used else 1) for p in self.phases.values())

    @cached_property
    def replica_gpus(self) -> int:
        return self.pp * self.group_width

    @cached_property
    def gpus_needed(self) -> int:
        return self.dp * self.replica_gpus

    def device(self, replica: int, stage: int, local: int) -> int:
        return replica * self.replica_gpus + stage * self.group_width + local

    def stage_devices(self, replica: int, stage: int) -> list[int]:
        base = self.device(replica, stage, 0)
        return list(range(base, base + self.group_width))

    def replica_devices(self, replica: int) -> list[int]:
        base = replica * self.replica_gpus
        return list(range(base, base + self.replica_gpus))

    @cached_property
    def layer_split(self) -> list[int]:
        """Layers per stage: the plan's explicit split, else as even as possible (earlier stages get extra)."""
        explicit = self.plan.options.layer_split
        if explicit is not None:
            return list(explicit)
        layers, pp = self.plan.spec.num_layers, self.pp
        base, extra = divmod(layers, pp)
        return [base + (1 if s < extra else 0) for s in range(pp)]

    @cached_property
    def stage_layers(self) -> list[range]:
        """One contiguous layer range per stage, clipped to the model's layers (a bad split shows as gaps)."""
        out, start = [], 0
        n = self.plan.spec.num_layers
        split = self.layer_split[: self.pp] + [0] * max(0, self.pp - len(self.layer_split))
        for count in split:
            stop = min(start + count, n)
            out.append(range(min(start, n), stop))
            start += count
        return out


def nominal_product(plan: Plan) -> int:
    """The mechanically multiplied GPU count an agent might wrongly claim (dp*pp*tp*ep*sp)."""
    d = plan.parallel
    return d.dp * d.pp * d.tp * d.ep * d.sp
