"""Fast phase latencies for the search: one sub-DAG per distinct layer instead of the whole DAG.

The critical path of a phase is additive over layers: every layer starts from one join of the previous
layer's outputs (its pre-attention norm; with attention-DP each group's entry, and the groups are identical),
so a stage's time is the sum, over its layers, of the longest path through one layer of that kind (dense or
MoE, full or sliding-window attention), plus its embedding / final norm / LM head / stage transfer.  This
module builds one such layer per kind and stage with the DAG builder itself (same nodes, same costs as
``estimate_performance``), and then prices a batch in well under a millisecond.  Pipeline micro-batching and
the deployment figures follow ``core._phase`` and ``core.headline``.  (Not modelled here: an aggregated
plan whose prefill and decode differ in SP re-shards the KV after prefill; the search never builds one.)
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from tools.core.build import BuildContext, Builder
from tools.core.dag import NodeType
from tools.core.efficiency import plan_efficiency
from tools.core.layout import Layout, vocab_shards
from tools.core.plan import PHASES, Phase, Plan
from tools.core.working import layer_signature
from tools.estimate.costs import CostModel, host_us_per_kernel, pass_schedule
from tools.estimate.headline import Headline, headline, node_batch

__all__ = ["FastEstimator", "PriceBook"]


class PriceBook:
    """Phase prices shared by the estimators of several plans (a search's simulations): a plan's phase that is
    built and priced as another's (same model, hardware, lengths and efficiency, same degrees, and the same nodes
    with the same cost keys on the same GPUs) costs the same, so each (phase, lengths, batch) is priced once
    among them.  Why: the serving simulator prices its cost surface per plan, and a search's disaggregated plans
    pair a few prefill layouts with a few decode layouts."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}
        self.parts: dict[tuple[int, int, int, int], tuple[float, float, float]] = {}

    def id_of(self, signature: tuple[Any, ...]) -> int:
        """A small number standing for a phase's signature (the dictionary of prices hashes it, not the nodes)."""
        return self._ids.setdefault(signature, len(self._ids))


@dataclass
class _Segment:
    """One layer's nodes in topological order, with in-layer predecessors, and how many layers share it."""

    nodes: list[dict[str, Any]]
    preds: list[list[int]]
    exits: list[int]
    count: int
    on_lead: list[bool] = field(default_factory=list)  # runs on the stage's first GPU (its host launches it)
    keys: list[tuple[Any, ...]] = field(default_factory=list)  # CostModel.node_key of each node
    full: list[bool] = field(default_factory=list)  # sees every attention-DP group's tokens (``node_batch``)


@dataclass
class _Stage:
    layers: list[_Segment]
    fixed: list[dict[str, Any]]  # embedding, final norm, LM head, stage transfer: a chain, costed as a sum
    fixed_on_lead: list[bool] = field(default_factory=list)
    fixed_keys: list[tuple[Any, ...]] = field(default_factory=list)
    fixed_full: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Which nodes the stage's host launches, as ``core._stage_launches`` counts them: those on the stage's
        first GPU."""
        lead = min(min(a["devices"]) for a in self.fixed + [n for seg in self.layers for n in seg.nodes])
        self.fixed_on_lead = [lead in a["devices"] for a in self.fixed]
        for seg in self.layers:
            seg.on_lead = [lead in a["devices"] for a in seg.nodes]

    def key(self, model: CostModel) -> None:
        """Each node's cost key and batch rule, worked out once: a stage is priced at many batches and lengths
        (the links and shards, which the keys name, do not change with them)."""
        self.fixed_keys = [model.node_key(a) for a in self.fixed]
        self.fixed_full = [node_batch(a, 2, 2) == 2 for a in self.fixed]
        for seg in self.layers:
            seg.keys = [model.node_key(a) for a in seg.nodes]
            seg.full = [node_batch(a, 2, 2) == 2 for a in seg.nodes]


def _topological(ids: list[str], edges: list[tuple[str, str]]) -> tuple[list[int], list[list[int]]]:
    """Positions of ``ids`` in topological order, and each position's predecessors (edges leaving ``ids`` dropped)."""
    index = {v: i for i, v in enumerate(ids)}
    g = nx.DiGraph()
    g.add_nodes_from(range(len(ids)))
    g.add_edges_from((index[u], index[v]) for u, v in edges if u in index and v in index)
    return list(nx.topological_sort(g)), [list(g.predecessors(i)) for i in range(len(ids))]


class FastEstimator:
    """Per-layout phase latencies at any batch; build once per layout (the batch is not part of it)."""

    def __init__(self, plan: Plan, layout: Layout | None = None, eff: dict[str, float] | None = None,
                 overlap: bool | None = None, decode_queries: int = 1, prices: PriceBook | None = None) -> None:
        """``decode_queries``: tokens per sequence in a decode step (k + 1 for a step that verifies k drafts);
        ``prices``: phase prices shared with other plans' estimators (``PriceBook``)."""
        self.plan = plan
        self.layout = layout or Layout(plan)
        self.eff = eff or plan_efficiency(plan)
        self.model = CostModel(plan, self.layout, self.eff, plan.options.overlap_comm if overlap is None else overlap,
                               decode_queries=decode_queries)
        self.step = {"prefill": self.eff["step_overhead_ms"] * 1e-3,
                     "decode": self.eff["decode_step_overhead_ms"] * 1e-3}
        self.stages = self._build()
        self._phase_ms: dict[tuple[str, int], tuple[float, float, float]] = {}
        self.prices = prices
        self._book_ids: dict[str, int] = {}  # per phase, its signature's id in ``prices`` (lengths apart)

    def _book_id(self, phase: Phase) -> int:
        """What the phase's price depends on besides the lengths and the batch, as an id in ``prices``: the plan
        but its degrees, options and workload; the efficiency and cost model settings; the phase's degrees but dp;
        every node's cost key, batch rule, GPUs and place in its layer; the pipeline depth."""
        hit = self._book_ids.get(phase)
        if hit is None:
            assert self.prices is not None
            plan, lay, model = self.plan, self.layout, self.model
            stages = tuple((tuple(st.fixed_keys), tuple(st.fixed_full), tuple(st.fixed_on_lead),
                            tuple(tuple(a["devices"]) for a in st.fixed),
                            tuple((tuple(seg.keys), tuple(seg.full), tuple(seg.on_lead), tuple(map(tuple, seg.preds)),
                                   tuple(seg.exits), seg.count, tuple(tuple(a["devices"]) for a in seg.nodes))
                                  for seg in st.layers))
                           for st in self.stages[phase])
            signature = (phase, plan.model_dump_json(exclude={"parallel", "phases", "options", "workload"}),
                         tuple(sorted(self.eff.items())), model.overlap, model.balanced_experts, model.decode_queries,
                         replace(lay.phases[phase], dp=1), lay.phases["decode"].dcp, lay.pools[phase].pp, stages)
            hit = self._book_ids[phase] = self.prices.id_of(signature)
        return hit

    def _build(self) -> dict[Phase, list[_Stage]]:
        plan, lay, spec = self.plan, self.layout, self.plan.spec
        b = Builder(plan, lay)
        out: dict[Phase, list[_Stage]] = {}
        for phase in PHASES:
            pool, pl = lay.pools[phase], lay.phases[phase]
            rid = ("p0" if phase == "prefill" else "d0") if lay.disaggregated else "r0"
            ctx = BuildContext(rid, 0, phase, pl, pool, "p0" if lay.disaggregated else rid)
            stages: list[_Stage] = []
            for s, layers in enumerate(pool.stage_layers):
                t_dev = b.token_devices(pool, 0, s, pl)
                kinds: dict[tuple[bool, bool, bool, bool], list[int]] = defaultdict(list)
                for i in layers:
                    kinds[layer_signature(spec, i)].append(i)
                segments = []
                for members in kinds.values():
                    n0, e0 = len(b.nodes), len(b.edges)
                    entry = b.node(f"{rid}.{phase}.s{s}.tpl{members[0]}", NodeType.STAGE, t_dev, phase=phase, stage=s)
                    if pl.attn_dp > 1:
                        groups = b.layer_attention_dp(ctx, s, members[0], {g: [entry] for g in range(pl.attn_dp)})
                        exits = [o for g in sorted(groups) for o in groups[g]]
                    else:
                        exits = b.layer(ctx, s, members[0], [entry])
                    kept = [(v, a) for v, a in b.nodes[n0:] if a.get("phase") == phase
                            and a["type"] != NodeType.KV_TRANSFER]
                    ids = [v for v, _ in kept]
                    order, preds = _topological(ids, [(u, v) for u, v, _ in b.edges[e0:]])
                    pos = {old: new for new, old in enumerate(order)}
                    exit_ids = set(exits)
                    segments.append(_Segment(
                        nodes=[kept[i][1] for i in order],
                        preds=[[pos[p] for p in preds[i]] for i in order],
                        exits=[pos[i] for i, v in enumerate(ids) if v in exit_ids],
                        count=len(members),
                    ))
                fixed = []
                common = {"phase": phase, "replica": 0, "stage": s}
                shards = vocab_shards(plan, pl)
                vocab = {"meta": {"vocab_shards": shards}} if shards > 1 else {}
                if s == 0:
                    fixed.append({"type": NodeType.EMBEDDING, "devices": t_dev, **vocab, **common})
                    if vocab:
                        fixed.append({"type": NodeType.ALL_REDUCE, "devices": t_dev, "role": "vocab_sync", **common})
                if s == pool.pp - 1:
                    fixed.append({"type": NodeType.NORM, "devices": t_dev, "role": "final_norm", **common})
                    fixed.append({"type": NodeType.LM_HEAD, "devices": t_dev, **vocab, **common})
                    if vocab:
                        fixed.append({"type": NodeType.ALL_GATHER, "devices": t_dev, "role": "logits", **common})
                else:
                    nxt = b.token_devices(pool, 0, s + 1, pl)
                    fixed.append({"type": NodeType.SEND_RECV, "devices": sorted(set(t_dev) | set(nxt)),
                                  "role": "stage_transfer", **common})
                stages.append(_Stage(segments, fixed))
                stages[-1].key(self.model)
            out[phase] = stages
        return out

    # ------------------------------------------------------------------ pricing
    def stage_seconds(self, phase: Phase, batch: int, count_launches: bool = False) -> tuple[list[float], list[float]]:
        """Per stage: GPU time of the critical path, and (``count_launches``) the kernels the stage's host launches."""
        groups = self.layout.phases[phase].attn_dp
        cost = self.model.cost_keyed
        share = -(-batch // groups)  # ``node_batch``: one attention-DP group's sequences, or all of them
        out, launches = [], []
        for st in self.stages[phase]:
            fixed = [cost(k, a, batch if full else share)
                     for a, k, full in zip(st.fixed, st.fixed_keys, st.fixed_full, strict=True)]
            t = sum(c.seconds for c in fixed)
            n = sum(c.launches for c, lead in zip(fixed, st.fixed_on_lead, strict=True) if lead) \
                if count_launches else 0.0
            for seg in st.layers:
                dist = [0.0] * len(seg.nodes)
                keys, fulls = seg.keys, seg.full
                for i, attrs in enumerate(seg.nodes):
                    c = cost(keys[i], attrs, batch if fulls[i] else share)
                    dist[i] = max((dist[p] for p in seg.preds[i]), default=0.0) + c.seconds
                    if count_launches and seg.on_lead[i]:
                        n += seg.count * c.launches
                t += seg.count * max(dist[i] for i in seg.exits)
            out.append(t)
            launches.append(n)
        return out, launches

    def phase_parts(self, phase: Phase, batch: int) -> tuple[float, float, float]:
        """One prefill pass / one decode step of ``batch`` sequences as ``core._phase`` prices it: latency (ms,
        with the step overhead), the host's time to launch the pass's kernels and the part of the latency spent
        waiting for it (eager phases only, else 0)."""
        key = (phase, batch)
        hit = self._phase_ms.get(key)
        if hit is not None:
            return hit
        if self.prices is not None:
            shared = (self._book_id(phase), self.model.input_len, self.model.output_len, batch)
            hit = self.prices.parts.get(shared)
            if hit is None:
                hit = self.prices.parts[shared] = self._phase_parts(phase, batch)
            self._phase_ms[key] = hit
            return hit
        hit = self._phase_ms[key] = self._phase_parts(phase, batch)
        return hit

    def _phase_parts(self, phase: Phase, batch: int) -> tuple[float, float, float]:
        host_us = host_us_per_kernel(self.eff, phase, self.model.tokens(phase, batch))
        pp = self.layout.pools[phase].pp
        gpu, kern = self.stage_seconds(phase, batch, bool(host_us))
        m = min(batch, pp)
        mgpu, mkern = self.stage_seconds(phase, math.ceil(batch / m), bool(host_us)) if pp > 1 and m > 1 else \
            (None, None)
        latency, gpu_latency, _ = pass_schedule(phase, gpu, kern, m, mgpu, mkern, host_us)
        return (latency + self.step[phase]) * 1e3, sum(kern) * host_us * 1e-3, (latency - gpu_latency) * 1e3

    def phase_ms(self, phase: Phase, batch: int) -> float:
        """Latency of one prefill pass / one decode step of ``batch`` sequences, as ``core._phase`` computes it."""
        return self.phase_parts(phase, batch)[0]

    def for_lengths(self, input_len: int, output_len: int) -> FastEstimator:
        """The same sub-DAGs priced for other sequence lengths (the layout does not depend on them): the serving
        simulator prices steps of any prompt length or context this way without rebuilding anything."""
        other = copy.copy(self)
        wl = self.plan.workload.model_copy(update={"input_len": max(1, input_len), "output_len": max(1, output_len)})
        other.plan = self.plan.model_copy(update={"workload": wl})
        other.model = CostModel(other.plan, self.layout, self.eff, self.model.overlap, self.model.balanced_experts,
                                decode_queries=self.model.decode_queries)
        other._phase_ms = {}
        return other

    def headline(self, batch: int, num_gpus: int | None = None) -> Headline:
        """TTFT, TPOT, e2e and throughput at ``batch`` (``num_gpus``: the cluster used to balance pools)."""
        return headline(self.plan, self.layout, self.eff, self.phase_ms("prefill", batch),
                        self.phase_ms("decode", batch), self.layout.pools["prefill"].replica_gpus,
                        batch=batch, num_gpus=num_gpus)
