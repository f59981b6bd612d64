"""The execution DAG: a networkx graph inside, versioned node-link JSON outside, with a published schema."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

DAG_FORMAT = "pdag.dag"
DAG_VERSION = 2
MAX_NODES = 30_000  # bound on what a submitted document may hold (judging one this size, unfolded, takes ~1.5 s)
MAX_WORKING_NODES = 20_000  # bound on the working form of a plan (one replica per pool, folded layers): ~2 s
MAX_FOLD_COUNT = 1_000_000  # copies a replica fold or layers a layer fold may stand for
MAX_EDGES = 60_000


class NodeType(StrEnum):
    REQUEST = "RequestNode"
    REPLICA = "ReplicaNode"
    PHASE = "PhaseNode"
    STAGE = "PipelineStageNode"
    DECODE_STEP = "DecodeStepNode"
    EMBEDDING = "EmbeddingNode"
    NORM = "NormNode"
    ATTENTION = "AttentionNode"
    FFN = "FFNNode"
    MOE = "MoENode"
    ROUTER = "RouterNode"
    EXPERT = "ExpertNode"
    LINEAR = "LinearNode"
    LM_HEAD = "LMHeadNode"
    KV_CACHE = "KVCacheUpdateNode"
    ALL_REDUCE = "AllReduceNode"
    ALL_GATHER = "AllGatherNode"
    REDUCE_SCATTER = "ReduceScatterNode"
    ALL_TO_ALL = "AllToAllNode"
    SEND_RECV = "SendRecvNode"
    KV_TRANSFER = "KVTransferNode"
    ATTN_DP_GROUP = "AttentionDPGroupNode"


class EdgeType(StrEnum):
    DATA = "data"
    PIPELINE = "pipeline"
    SYNC = "sync"
    KV = "kv"


CONTROL_TYPES = frozenset(
    {
        NodeType.REQUEST,
        NodeType.REPLICA,
        NodeType.PHASE,
        NodeType.STAGE,
        NodeType.DECODE_STEP,
        NodeType.MOE,
        NodeType.ATTN_DP_GROUP,
    }
)
COMM_TYPES = frozenset(
    {
        NodeType.ALL_REDUCE,
        NodeType.ALL_GATHER,
        NodeType.REDUCE_SCATTER,
        NodeType.ALL_TO_ALL,
        NodeType.SEND_RECV,
        NodeType.KV_TRANSFER,
    }
)


class Node(BaseModel):
    """One DAG node.  Shard coordinates are set only where the node is one shard of a parallel operator."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    type: NodeType
    devices: list[int] = Field(max_length=65_536, description="GPU ids this node runs on (global numbering)")
    phase: Literal["prefill", "decode"] | None = None
    replica: int | None = Field(None, ge=0)
    stage: int | None = Field(None, ge=0)
    layer: int | None = Field(None, ge=0, description="0-based transformer layer")
    layers: list[int] | None = Field(None, max_length=2, description="[first, last+1] layers of a stage node")
    op: str | None = Field(None, max_length=200, description="logical operator this shard belongs to")
    role: str | None = Field(None, max_length=40, description="e.g. dispatch, combine, tp_sync, sp_sync, shared")
    tp_rank: int | None = Field(None, ge=0)
    sp_rank: int | None = Field(None, ge=0)
    ep_rank: int | None = Field(None, ge=0)
    attn_group: int | None = Field(None, ge=0, description="attention-DP group (only with opt-in attention-DP)")
    experts: list[int] | None = Field(None, max_length=100_000, description="experts held by an Expert node")
    heads: int | None = Field(None, ge=0, description="query heads in this attention shard (a node drawn over "
                              "several GPUs of its operator: the node's total, shared by its GPUs)")
    kv_heads: int | None = Field(None, ge=0, description="KV heads held by this shard (after replication; a node "
                                 "over several GPUs: the node's, shared by its GPUs)")
    repeat: int | None = Field(None, ge=1, le=MAX_FOLD_COUNT,
                               description="layers this node stands for (set on the nodes of a layer fold)")
    meta: dict[str, Any] = Field(default_factory=dict)


class Edge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=200)
    target: str = Field(min_length=1, max_length=200)
    type: EdgeType = EdgeType.DATA


class ReplicaFoldJson(BaseModel):
    """The drawn replica ``node`` (and everything under it) stands for ``count`` copies, copy k on devices
    shifted by ``k * stride``; ``stride`` must be at least the replica's device span."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=200)
    count: int = Field(ge=1, le=MAX_FOLD_COUNT)
    stride: int = Field(ge=1, le=MAX_FOLD_COUNT)


class LayerFoldJson(BaseModel):
    """The listed nodes are the drawn layer ``first_layer``; they stand for ``repeat`` consecutive layers on the
    same GPUs.  ``carry`` lists [exit, entry] pairs chaining copy i's exit to copy i+1's entry."""

    model_config = ConfigDict(extra="forbid")

    nodes: list[str] = Field(min_length=1, max_length=MAX_NODES)
    first_layer: int = Field(ge=0, le=MAX_FOLD_COUNT)
    repeat: int = Field(ge=1, le=MAX_FOLD_COUNT)
    carry: list[tuple[str, str]] = Field(default_factory=list, max_length=MAX_NODES)


class Folds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: list[ReplicaFoldJson] = Field(default_factory=list, max_length=MAX_NODES)
    layers: list[LayerFoldJson] = Field(default_factory=list, max_length=MAX_NODES)


class Dag(BaseModel):
    """Node-link JSON of an execution DAG."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["pdag.dag"] = DAG_FORMAT
    version: Literal[1, 2] = DAG_VERSION
    model: str | None = Field(None, description="model preset id (or name) the DAG was built for")
    plan: dict[str, Any] | None = Field(None, description="the plan the DAG was built from, when known")
    nodes: list[Node] = Field(max_length=MAX_NODES)
    edges: list[Edge] = Field(max_length=MAX_EDGES)
    folds: Folds | None = Field(None, description="replicas and layers the drawn nodes stand for (version 2)")


def dag_json_schema() -> dict[str, Any]:
    """The published JSON Schema of a DAG document (generated from the pydantic models)."""
    schema = Dag.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://pdag.dev/schema/dag-v2.json"
    return schema


def lists_to_json(nodes: Iterable[tuple[str, dict[str, Any]]], edges: Iterable[tuple[str, str, dict[str, Any]]],
                  model: str | None, plan: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "format": DAG_FORMAT,
        "version": DAG_VERSION,
        "model": model,
        "plan": plan,
        "nodes": [{"id": node_id, **attrs} for node_id, attrs in nodes],
        "edges": [{"source": u, "target": v, "type": a["type"]} for u, v, a in edges],
    }


def json_to_graph(dag: Dag) -> nx.DiGraph:
    """Load a schema-valid DAG into networkx.  Edges to unknown nodes are kept out and reported by callers."""
    graph = nx.DiGraph(model=dag.model, plan=dag.plan)
    for node in dag.nodes:
        attrs = node.model_dump(exclude={"id"}, exclude_none=True)
        graph.add_node(node.id, **attrs)
    for edge in dag.edges:
        if edge.source in graph and edge.target in graph:
            graph.add_edge(edge.source, edge.target, type=edge.type)
    return graph
