"""TP-*: tensor parallelism shards attention heads and FFN width inside one operator and rejoins at once."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.core.hardware import DTYPE_BYTES
from tools.core.quantization import weight_block
from tools.rules.gpus import op_name
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer, param, scope, set_degree

TP_OK_TYPES = {NodeType.ATTENTION, NodeType.FFN, NodeType.LINEAR, NodeType.KV_CACHE}
NOT_TP_TYPES = {NodeType.EMBEDDING, NodeType.NORM, NodeType.ROUTER, NodeType.LM_HEAD}
REJOIN_OK = {NodeType.ALL_REDUCE, NodeType.ALL_GATHER, NodeType.REDUCE_SCATTER, NodeType.ALL_TO_ALL,
             NodeType.KV_CACHE}


def tp_groups(ctx: Context) -> Iterator[tuple[Any, list[str]]]:
    """Operators split over two or more TP ranks (expert TP shards included), and attention / FFN / linear
    operators drawn as one node over several GPUs (a TP operator written as one logical node, which the same
    collective must rejoin) when the plan, if any, has TP."""
    grouped: set[str] = set()
    for key, shards in ctx.ops.items():
        grouped.update(shards)
        if ctx.tp_width(shards) > 1:
            yield key, shards
    if ctx.plan is not None and ctx.layout is not None and max(pl.tp for pl in ctx.layout.phases.values()) < 2:
        return
    for n in ctx.of(NodeType.ATTENTION, NodeType.FFN, NodeType.LINEAR):
        if n not in grouped and len(ctx.devices[n]) > 1 and ctx.attr(n, "tp_rank") is None:
            yield (None, n), [n]


@checker("TP-OPERATOR-SCOPE")
def check_operator_scope(ctx: Context) -> Iterator[Finding]:
    bad = [n for n, a in ctx.nattr.items()
           if (a.get("tp_rank") is not None or "tp_shard" in (a.get("meta") or {}))
           and ctx.types[n] not in TP_OK_TYPES | NOT_TP_TYPES | {NodeType.EXPERT}]
    if bad:
        yield Finding(f"{len(bad)} node(s) of type {ctx.types[bad[0]]} are TP-sharded (e.g. {bad[0]}); TP shards only "
                      "attention (by heads) and FFN / shared experts (by width)", bad,
                      hint="shard the attention and FFN operators inside the layer instead")


def _layer_stage(ctx: Context, n: str) -> tuple[Any, Any]:
    return ctx.key(n, "layer", "stage")


def tp_chained(ctx: Context, s: str, v: str) -> bool:
    """``v`` continues shard ``s`` on its own GPUs inside one logical operator: the Megatron split of attention
    (QKV linear shard -> attention shard -> output-projection shard, one AllReduce at the end), which seed 001
    section 3.1 allows (TP on the Linear nodes of one compute node)."""
    if ctx.types[v] not in TP_OK_TYPES - {NodeType.KV_CACHE} or ctx.key(v, "layer") != ctx.key(s, "layer"):
        return False
    if NodeType.LINEAR not in (ctx.types[s], ctx.types[v]) and ctx.types[s] != ctx.types[v]:
        return False  # attention -> FFN is two operators: the attention's partial sums are reduced in between
    if ctx.attr(v, "tp_rank") is None and ctx.attr(s, "tp_rank") is None:
        # the same split drawn one node per operator over the whole TP group (QKV -> attention -> output
        # projection, each over the same GPUs): still one operator's shards, joined after the last
        return len(ctx.devices[s]) > 1 and ctx.devices[v] == ctx.devices[s]
    return ctx.attr(v, "tp_rank") == ctx.attr(s, "tp_rank") and ctx.devices[v] <= ctx.devices[s]


_REDUCING = (NodeType.ALL_REDUCE, NodeType.REDUCE_SCATTER, NodeType.ALL_TO_ALL)


def _reduced(ctx: Context, s: str) -> bool:
    """A TP shard's partial result is summed: it feeds a reduction, directly or after the SP AllGather."""
    for v in ctx.succ[s]:
        if ctx.types[v] in _REDUCING:
            return True
        if ctx.types[v] == NodeType.ALL_GATHER and any(ctx.types[w] in _REDUCING for w in ctx.succ[v]):
            return True
    return False


@checker("TP-REJOIN-BEFORE-NEXT-LAYER")
def check_rejoin(ctx: Context) -> Iterator[Finding]:
    for key, shards in sorted(tp_groups(ctx), key=lambda kv: str(kv[0])):
        members = set(shards)
        bad = []
        dead = []
        chained = False
        joined: set[int] = set()
        for s in shards:
            onward = False
            for v in ctx.succ[s]:
                t = ctx.types[v]
                if v in members or ctx.succ[s][v].get("type") == "sync":
                    continue
                if t in REJOIN_OK:
                    if t != NodeType.KV_CACHE:
                        joined |= ctx.devices[v]
                        onward = True
                elif tp_chained(ctx, s, v):
                    chained = onward = True
                else:
                    bad.append((s, v))
                    onward = True
            if not onward:
                dead.append(s)
        devs = frozenset().union(*(ctx.devices[s] for s in shards))
        op = op_name(ctx, key, shards[0])
        if bad:
            s, v = bad[0]
            yield Finding(f"TP shard {s} feeds the {ctx.types[v]} {v} directly; the shards of a TP operator rejoin "
                          "through an explicit AllReduceNode (or AllGather/ReduceScatter) before anything else reads "
                          "them", [s, v], hint=f"insert an AllReduceNode on GPUs {sorted(devs)[:16]} between the "
                                               f"shards of {op} and {v}")
            continue
        if dead:
            yield Finding(f"TP shard {dead[0]} of {op} leads nowhere: its partial result never reaches the "
                          "collective that rejoins the operator", dead,
                          hint=f"add the edge {dead[0]} -> the AllReduceNode joining {op}")
            continue
        if not chained and not devs <= joined:
            yield Finding(f"the TP shards of {op} on GPUs {sorted(devs)[:8]} are never joined by a collective on "
                          "those GPUs", shards, hint=f"insert an AllReduceNode over GPUs {sorted(devs)[:16]}")
        elif not chained and not any(_reduced(ctx, s) for s in shards):
            gather = next((v for s in shards for v in ctx.succ[s] if ctx.types[v] == NodeType.ALL_GATHER), None)
            yield Finding(f"the {ctx.tp_width(shards)} head/width shards of {op} are gathered but never summed: "
                          f"their partial results need a reduction (AllReduce) after {gather or 'the gather'}",
                          shards, hint=f"insert an AllReduceNode on GPUs {sorted(devs)[:16]} after "
                                       f"{gather or 'the gather'}")

    # vocab-parallel embedding / LM head: each rank holds some rows, so a collective must follow
    joins = {NodeType.EMBEDDING: (NodeType.ALL_REDUCE, "AllReduceNode"), NodeType.LM_HEAD: (NodeType.ALL_GATHER,
                                                                                            "AllGatherNode")}
    for n in ctx.of(NodeType.EMBEDDING, NodeType.LM_HEAD):
        if int((ctx.attr(n, "meta") or {}).get("vocab_shards", 1) or 1) <= 1:
            continue
        want, name = joins[ctx.types[n]]
        if not any(ctx.types[v] == want for v in ctx.succ[n]):
            yield Finding(f"{n} is split by vocabulary (meta.vocab_shards) but no {name} joins its slices; each rank "
                          "holds only some rows", [n], hint=f"insert an {name} on GPUs {sorted(ctx.devices[n])[:16]} "
                                                           f"right after {n}")


def _where(layer_stage: tuple[Any, Any]) -> str:
    """'layer 3, stage 1', leaving out what the DAG does not say (no 'None' in a message)."""
    said = [f"{k} {v}" for k, v in zip(("layer", "stage"), layer_stage, strict=True) if v is not None]
    return ", ".join(said) or "outside any layer and stage"


@checker("TP-NO-CROSS-LAYER")
def check_no_cross_layer(ctx: Context) -> Iterator[Finding]:
    for _key, shards in sorted(tp_groups(ctx), key=lambda kv: str(kv[0])):
        for s in shards:
            ls = _layer_stage(ctx, s)
            for v in ctx.succ[s]:
                if ctx.types[v] in (NodeType.KV_CACHE,) or ctx.succ[s][v].get("type") == "sync":
                    continue
                lv = _layer_stage(ctx, v)
                if (lv[0] is not None and ls[0] is not None and lv[0] != ls[0]) or \
                        (lv[1] is not None and ls[1] is not None and lv[1] != ls[1]):
                    yield Finding(f"TP shard {s} ({_where(ls)}) feeds {v} ({_where(lv)}); a TP region starts and "
                                  "ends inside one operator of one layer", [s, v])
                    return


@checker("TP-NOT-EMBED-NORM-ROUTER")
def check_not_embed_norm_router(ctx: Context) -> Iterator[Finding]:
    bad = [n for n in ctx.of(*sorted(NOT_TP_TYPES)) if ctx.attr(n, "tp_rank") is not None
           or "tp_shard" in (ctx.attr(n, "meta") or {})]
    if bad:
        kinds = sorted({ctx.types[b] for b in bad})
        yield Finding(f"{len(bad)} node(s) of type {', '.join(kinds)} are TP-sharded (e.g. {bad[0]}); embeddings, "
                      "norms, routers and the LM head are not TP-sharded: they run replicated on the neighbouring "
                      "operator's GPUs", bad, hint=f"drop tp_rank from these {len(bad)} node(s) and list on each the "
                                                   "GPUs of the operator next to it")
    for root in ctx.of(NodeType.REQUEST):
        kids = [k for k in ctx.succ[root] if ctx.attr(k, "tp_rank") is not None]
        if kids:
            gpus = sorted({d for k in kids for d in ctx.devices[k]})
            yield Finding(f"{len(kids)} TP shards hang directly under the RequestNode ({', '.join(kids[:3])}): TP "
                          "never wraps the whole model", [root, *kids],
                          hint=f"draw one replica on GPUs {gpus[:16]} instead of {len(kids)} per-rank copies, and "
                               f"split only its attention and FFN operators into {len(kids)} shards (tp_rank "
                               f"0..{len(kids) - 1}), each followed by an AllReduceNode")


def _tp_ok(spec: Any, t: int) -> bool:
    if any(q % t for q in spec.q_head_counts):
        return False
    if spec.attention != "mla" and any(kv % t and t % kv for kv in spec.kv_head_counts):
        return False
    if spec.dense_layer_indices and spec.intermediate_size and spec.intermediate_size % t:
        return False
    if recurrent_heads_split(spec, t):
        return False
    return not (spec.moe and spec.moe.shared_expert_intermediate_size % t)


def recurrent_heads_split(spec: Any, t: int) -> str | None:
    """Why ``t`` head shards cannot split the recurrent layers (None when they can): the engines give each TP rank
    whole value heads and whole key heads (GDN) or whole SSM heads and whole groups (Mamba-2), and keep no replica."""
    rec = spec.recurrent
    if rec is None:
        return None
    heads, keys = {"gated_deltanet": ("linear-attention value heads", "linear-attention key heads"),
                   "kda": ("Kimi Delta Attention heads", "Kimi Delta Attention heads"),
                   "lightning": ("lightning-attention heads", "lightning-attention heads")}.get(
        rec.kind, ("Mamba heads", "Mamba groups (n_groups)"))
    if rec.num_heads % t:
        return f"{rec.num_heads} {heads}"
    if rec.num_key_heads % t and not rec.groups_replicated(t):
        return f"{rec.num_key_heads} {keys}"
    return None


@checker("TP-HEADS-DIVISIBLE", needs="plan")
def check_heads(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    for ph, pl in ctx.layout.phases.items():
        hs = pl.head_shards
        heads = next((q for q in spec.q_head_counts if q % hs), None)  # each layer's query heads (Step-3.5: two)
        if heads is not None:
            yield Finding(f"{ph}: {heads} attention heads do not divide into {hs} head shards (tp {pl.tp}, "
                          f"sp {pl.sp}); heads must divide by TP", field=field_of(ph, "tp", ctx.plan),
                          hint=f"use a tp that divides {heads}")
            return
        widths = []
        if spec.dense_layer_indices and spec.intermediate_size:
            widths.append(("dense FFN intermediate size", spec.intermediate_size))
        if spec.moe and spec.moe.shared_expert_intermediate_size:
            widths.append(("shared-expert intermediate size", spec.moe.shared_expert_intermediate_size))
        for what, size in widths:
            if size % pl.tp:
                yield Finding(f"{ph}: the {what} {size} does not divide by tp = {pl.tp}",
                              field=field_of(ph, "tp", ctx.plan), hint="use a tp that divides it")
                return


def nearest_tp(ctx: Context, tp: int) -> int:
    """The valid tp closest to the current one (on a log scale), preferring one whose layout fits in memory and
    then the smaller one (fewer GPUs): a single step instead of 'round down, then grow for memory'."""
    from tools.rules.memory import fits_with

    assert ctx.plan is not None
    spec = ctx.plan.spec
    valid = [t for t in range(1, spec.num_heads + 1) if _tp_ok(spec, t)]
    valid.sort(key=lambda t: (abs(math.log2(t / tp)), t))
    for t in valid[:4]:
        if fits_with(ctx.plan, tp=t):
            return t
    return valid[0]


def set_tp(plan: dict[str, Any], ctx: Context, rule_id: str, why: str) -> list[Change]:
    changes = []
    par = plan.setdefault("parallel", {})
    targets = [("plan.parallel.tp", par)] + [(f"plan.phases.{ph}.tp", o) for ph, o in
                                            (plan.get("phases") or {}).items() if isinstance(o, dict) and "tp" in o]
    for path, d in targets:
        before = d.get("tp", 1)
        new = nearest_tp(ctx, before)
        if new != before:
            d["tp"] = new
            changes.append(Change(rule_id=rule_id, message=f"set tp from {before} to {new}: {why}", field=path,
                                  before=before, after=new))
    return changes


@fixer("TP-HEADS-DIVISIBLE")
def fix_heads(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_tp(plan, ctx, "TP-HEADS-DIVISIBLE", "the nearest degree that divides the heads and FFN width")


@checker("TP-KV-HEADS-DIVISIBLE", needs="plan")
def check_kv_heads(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    if spec.attention == "mla":
        return
    for ph, pl in ctx.layout.phases.items():
        hs = pl.head_shards
        kv = next((k for k in spec.kv_head_counts if k % hs and hs % k), None)  # Gemma-4 has two counts
        if kv is not None:
            yield Finding(f"{ph}: {kv} KV heads neither divide by nor divide {hs} head shards; each rank would hold a "
                          "fraction of a KV head", field=field_of(ph, "tp", ctx.plan),
                          hint=f"use a tp that divides {kv} or a multiple of it")
            return


@checker("TP-RECURRENT-HEADS-DIVISIBLE", needs="plan")
def check_recurrent_heads(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    for ph, pl in ctx.layout.phases.items():
        why = recurrent_heads_split(spec, pl.head_shards)
        if why:
            rec = spec.recurrent
            assert rec is not None
            yield Finding(f"{ph}: the {why} of {spec.id}'s {len(rec.layers)} recurrent layers do not divide into "
                          f"{pl.head_shards} head shards (tp {pl.tp}, sp {pl.sp}); each rank needs whole heads and "
                          "their state", field=field_of(ph, "tp", ctx.plan),
                          hint=f"use a tp that divides {rec.num_key_heads} (and so {rec.num_heads})")
            return


@fixer("TP-RECURRENT-HEADS-DIVISIBLE")
def fix_recurrent_heads(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_tp(plan, ctx, "TP-RECURRENT-HEADS-DIVISIBLE", "the nearest degree that splits the recurrent heads")


@fixer("TP-KV-HEADS-DIVISIBLE")
def fix_kv_heads(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.plan is not None
    kv = " and ".join(str(k) for k in ctx.plan.spec.kv_head_counts)
    return set_tp(plan, ctx, "TP-KV-HEADS-DIVISIBLE", f"a degree compatible with the {kv} KV heads")


@checker("TP-KV-REPLICATED", needs="plan")
def check_kv_replicated(ctx: Context) -> Iterator[Finding]:
    """Engines replicate KV heads silently when tp exceeds them; pdag accepts it and states what it costs."""
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    if spec.attention == "mla":
        return
    kv = min(spec.kv_head_counts)  # the fewest heads replicate first (Gemma-4's full-attention layers)
    kv_bytes = DTYPE_BYTES[ctx.plan.effective_kv_dtype]
    for ph, pl in ctx.layout.phases.items():
        hs = pl.head_shards
        if hs <= kv or hs % kv:
            continue
        per_gpu = float(spec.kv_bytes_per_token(kv_bytes)) / kv / pl.pp
        sharded = float(spec.kv_bytes_per_token(kv_bytes)) / hs / pl.pp
        yield Finding(f"{ph}: {hs} head shards exceed the {kv} KV heads, so each KV head is replicated {hs // kv} "
                      f"times (as vLLM, SGLang and TensorRT-LLM do): each GPU stores {per_gpu / 1024:.1f} KiB of KV "
                      f"per token instead of {sharded / 1024:.1f} KiB if the heads could be split",
                      field=field_of(ph, "tp", ctx.plan),
                      hint=f"tp <= {kv} avoids the replication (spend the other GPUs on dp)")
        return


@checker("TP-WITHIN-NODE", needs="any")
def check_within_node(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        lay, gpn = ctx.layout, ctx.nvlink_domain  # TP stays inside the NVLink domain (a node, or an NVL72 rack)
        if max(pl.tp for pl in lay.phases.values()) <= 1:
            return
        for ph, pl in lay.phases.items():
            if pl.tp <= 1:
                continue
            pool = lay.pools[ph]
            # the TP group: the whole stage group, or one attention group's GPUs under attention-DP
            w = pool.group_width if pl.attn_dp == 1 else pl.attn_width
            if w > gpn:
                yield Finding(f"the TP group spans W = {w} GPUs but an NVLink domain has {gpn}; TP belongs inside "
                              "the fast NVLink domain", field="plan.parallel.tp",
                              hint=f"keep tp <= {gpn} and add pp (or dp) for the other GPUs")
                return
            for r in range(pool.dp):
                for s in range(pool.pp):
                    for g in range(pool.group_width // w):
                        first, last = pool.device(r, s, g * w), pool.device(r, s, g * w + w - 1)
                        if first // gpn != last // gpn:
                            yield Finding(f"{scope(r, ph)} stage {s}: the TP group on GPUs {first}-{last} straddles "
                                          f"an NVLink domain boundary ({gpn} GPUs per domain)",
                                          field="plan.parallel.tp",
                                          hint="use a stage group width that divides the NVLink domain")
                            return
        return
    if ctx.graph is None:
        return
    gpn = ctx.nvlink_domain
    bad = [n for n in ctx.of(NodeType.ALL_REDUCE) if len({d // gpn for d in ctx.devices[n]}) > 1]
    if bad:
        yield Finding(f"{len(bad)} TP all-reduce(s) span more than one NVLink domain of {gpn} GPUs (e.g. {bad[0]}); "
                      "TP belongs inside the NVLink domain", bad)


@checker("TP-DECODE-COMM-COST", needs="plan")
def check_decode_comm(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    gpn = ctx.nvlink_domain
    max_tp = int(param("TP-DECODE-COMM-COST", "max_tp"))
    if pl.tp > max_tp or (pl.tp > 1 and pl.tp > gpn):
        yield Finding(f"decode tp = {pl.tp}: every decode step pays one collective per sharded operator"
                      f"{' over the network' if pl.tp > gpn else ''}; beyond {max_tp} ranks decode latency rarely "
                      "improves", field=field_of("decode", "tp", ctx.plan),
                      hint=f"keep decode tp <= {max_tp} and within an NVLink domain")


def _block_shards(ctx: Context) -> Iterator[tuple[str, str, int, int, int]]:
    """(phase, degree, its value, FFN width, GPUs it is split over) for each tensor-parallel FFN shard: the
    dense FFN over tp, the experts over the expert-TP ranks (TP world / ep) when experts are split."""
    assert ctx.plan is not None and ctx.layout is not None
    spec, plan = ctx.plan.spec, ctx.plan
    for ph, pl in ctx.layout.phases.items():
        if spec.dense_layer_indices and spec.intermediate_size:
            yield ph, "tp", pl.tp, spec.intermediate_size, pl.tp
        world = pl.tp * pl.attn_dp
        if spec.moe and plan.options.allow_expert_tp and pl.ep <= world and world % pl.ep == 0:
            yield ph, "ep", pl.ep, spec.moe.expert_intermediate_size, world // pl.ep


def _whole_blocks(width: int, ways: int, block: int) -> bool:
    return width % ways == 0 and (width // ways) % block == 0


def _block_fit(ctx: Context, degree: str, value: int, width: int, ways: int, block: int) -> int | None:
    """The nearest degree whose shards hold whole blocks: a wider ep (fewer expert-TP ranks), or a smaller tp."""
    assert ctx.plan is not None
    if degree == "ep":
        world, experts = value * ways, ctx.plan.spec.moe.num_experts if ctx.plan.spec.moe else 1
        fits = [world // m for m in range(ways - 1, 0, -1)
                if world % m == 0 and experts % (world // m) == 0 and _whole_blocks(width, m, block)]
    else:
        fits = [t for t in range(value - 1, 0, -1) if value % t == 0 and _whole_blocks(width, t, block)]
    return fits[0] if fits else None


@checker("TP-QUANT-BLOCK-SHARD", needs="plan")
def check_block_shard(ctx: Context) -> Iterator[Finding]:
    """Block-scaled weights load only in whole blocks per GPU: the engines refuse a shard that cuts a block."""
    assert ctx.plan is not None
    block = weight_block(ctx.plan)
    if not block:
        return
    for ph, degree, value, width, ways in _block_shards(ctx):
        if ways > 1 and not _whole_blocks(width, ways, block):
            what = "expert FFN width" if degree == "ep" else "FFN width"
            fit = _block_fit(ctx, degree, value, width, ways, block)
            yield Finding(f"{ph}: the {what} {width} split over {ways} GPUs gives {width / ways:g}-wide shards, "
                          f"not whole {block}-wide blocks of the checkpoint's block-scaled fp8 weights; engines "
                          "refuse to load it (vLLM and SGLang: 'not divisible by weight quantization block_n')",
                          field=field_of(ph, degree, ctx.plan),
                          hint=(f"set {degree} = {fit}" if fit else f"keep the {what} in whole {block}-wide blocks")
                          + (f" or wider (ep = {value * ways} keeps every expert whole, which is all vLLM offers: "
                             "--enable-expert-parallel)" if degree == "ep" and fit and fit < value * ways else ""))
            return


@fixer("TP-QUANT-BLOCK-SHARD")
def fix_block_shard(plan: dict[str, Any], ctx: Context) -> list[Change]:
    block = weight_block(ctx.plan) if ctx.plan is not None else 0
    for _ph, degree, value, width, ways in _block_shards(ctx):
        if block and ways > 1 and not _whole_blocks(width, ways, block):
            fit = _block_fit(ctx, degree, value, width, ways, block)
            if fit is None:
                return []
            return set_degree(plan, degree, fit, "TP-QUANT-BLOCK-SHARD",
                              f"shards of whole {block}-wide blocks of the block-scaled fp8 weights")
    return []
