"""Hardware catalog: accelerators (``knowledge/hardware/accelerators.json``) and the cluster they form.

Units are in the field names: bytes, bytes per second, microseconds, dense TFLOPS (no 2:4 sparsity;
TOPS for the integer types). Link bandwidths are per GPU and per direction.
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from knowledge import ROOT as KNOWLEDGE_ROOT
from tools.core.absent import NullMeansAbsent
from tools.core.errors import MAX_MATCHED, PdagInputError, closest, shown

__all__ = [
    "DTYPE_BYTES",
    "Accelerator",
    "Cluster",
    "DenseTflops",
    "Link",
    "Network",
    "accelerator_id",
    "accelerator_ids",
    "load_accelerator",
    "resolve_accelerator",
]

HARDWARE_FILE = KNOWLEDGE_ROOT / "hardware" / "accelerators.json"
NETWORK_FILE = KNOWLEDGE_ROOT / "hardware" / "network.json"

DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

MAX_GPUS = 65_536
MAX_GPUS_PER_NODE = 72


class _Frozen(NullMeansAbsent):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Link(_Frozen):
    """One interconnect as seen from a single GPU."""

    kind: Literal["nvlink", "xgmi", "pcie", "infiniband", "ethernet", "roce"]
    bandwidth_bytes_per_s: float = Field(ge=1e6, le=1e15, description="per GPU, one direction; >= 1 MB/s")
    latency_us: float = Field(ge=0, le=1e6)
    mesh_links: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE,
                                   description="point-to-point links per GPU in a fully connected mesh (one per "
                                   "peer); null for a switched fabric, where every peer gets the full bandwidth")

    def for_group(self, gpus: int) -> Link:
        """The bandwidth a collective over ``gpus`` GPUs of one mesh gets: only the links to its gpus - 1 peers
        carry traffic, so TP2 on an 8-GPU xGMI mesh moves data over one link of seven."""
        if not self.mesh_links or gpus - 1 >= self.mesh_links:
            return self
        share = max(1, gpus - 1) / self.mesh_links
        return self.model_copy(update={"bandwidth_bytes_per_s": self.bandwidth_bytes_per_s * share})


class DenseTflops(_Frozen):
    """Dense peak tensor throughput per dtype (TFLOPS; TOPS for int8/int4); null when unsupported."""

    bf16: float | None = Field(default=None, ge=1e-3, le=1e7)
    fp16: float | None = Field(default=None, ge=1e-3, le=1e7)
    fp8: float | None = Field(default=None, ge=1e-3, le=1e7)
    int8: float | None = Field(default=None, ge=1e-3, le=1e7)
    int4: float | None = Field(default=None, ge=1e-3, le=1e7)
    fp4: float | None = Field(default=None, ge=1e-3, le=1e7,
                              description="FP4 tensor peak where the vendor states one; a datasheet figure, not a "
                                          "plan dtype (4-bit formats are priced as quantization.json says)")


class Accelerator(_Frozen):
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    vendor: str = Field(default="unknown", max_length=100)
    memory_bytes: int = Field(gt=0, le=10**14, description="capacity as the vendor states it, in bytes "
                              "(memory_unit: 80 GB = 80e9 bytes; a GiB figure = n * 2**30)")
    memory_unit: Literal["GB", "GiB"] = Field("GB", description="the unit the vendor states memory in")
    driver_memory_bytes: int | None = Field(
        default=None, gt=0, le=10**14,
        description="device total as the driver reports it (nvidia-smi / rocm-smi), where a public paste gives "
                    "it; engines size their memory fraction against it, so capacity checks use it when known")
    memory_bandwidth_bytes_per_s: float = Field(ge=1e6, le=1e15, description=">= 1 MB/s")
    dense_tflops: DenseTflops
    intra_node: Link
    inter_node: Link
    max_gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)
    nvlink_domain_gpus: int | None = Field(
        default=None, ge=1, le=MAX_GPUS,
        description="GPUs sharing one NVLink (scale-up) domain when it spans several nodes, e.g. 72 for NVL72 racks; "
                    "None: the domain is a node")
    sources: dict[str, str] = Field(default_factory=dict)
    notes: str | None = None

    @model_validator(mode="after")
    def _some_compute(self) -> Accelerator:
        if all(getattr(self.dense_tflops, d) is None for d in DTYPE_BYTES):
            raise ValueError("dense_tflops needs at least one supported dtype")
        return self

    @property
    def capacity_bytes(self) -> int:
        """Bytes a serving engine can budget on one GPU: the driver's total when known, else the vendor's."""
        return self.driver_memory_bytes or self.memory_bytes

    def memory_label(self) -> str:
        """The vendor's figure in its own unit, with the GiB the driver shows (capacity checks use the latter)."""
        unit = 10**9 if self.memory_unit == "GB" else 2**30
        stated = f"{self.memory_bytes / unit:.4g} {self.memory_unit}"
        if self.driver_memory_bytes:
            return f"{stated} (driver: {self.driver_memory_bytes / 2**30:.1f} GiB)"
        return f"{stated} ({self.memory_bytes / 2**30:.1f} GiB)"

    def supported_dtypes(self) -> list[str]:
        return [d for d in DTYPE_BYTES if getattr(self.dense_tflops, d) is not None]

    def supports(self, dtype: str) -> bool:
        return dtype in DTYPE_BYTES and getattr(self.dense_tflops, dtype) is not None

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s (OP/s for integer types) for ``dtype``."""
        if dtype not in DTYPE_BYTES:
            raise PdagInputError("dtype", f"unknown dtype {dtype!r}", ", ".join(DTYPE_BYTES))
        tflops = getattr(self.dense_tflops, dtype)
        if tflops is None:
            raise PdagInputError("dtype", f"{self.name} has no {dtype} tensor-core support",
                                 ", ".join(self.supported_dtypes()))
        return tflops * 1e12


def _network_defaults() -> dict[str, Any]:
    with open(NETWORK_FILE, encoding="utf-8") as f:
        return json.load(f)["network"]


_NET = _network_defaults()


class Network(_Frozen):
    """The scale-out fabric between NVLink domains (defaults and their sources: knowledge/hardware/network.json)."""

    rails: bool = Field(_NET["rails"], description="rail-optimized: GPU i of every node on leaf switch i (DGX "
                        "SuperPOD); false: one top-of-rack leaf per group of whole nodes")
    leaf_downlink_ports: int = Field(_NET["leaf_downlink_ports"], ge=1, le=MAX_GPUS,
                                     description="ports of a leaf switch facing GPUs")
    spine_oversubscription: float = Field(_NET["spine_oversubscription"], ge=1, le=64,
                                          description="leaf downlink to uplink bandwidth ratio (1: non-blocking)")
    switch_latency_us: float = Field(_NET["switch_latency_us"], ge=0, le=1000,
                                     description="one switch traversal")


class Cluster(_Frozen):
    """``num_gpus`` accelerators, ``gpus_per_node`` to a node; GPU ids are 0..num_gpus-1, node-major."""

    accelerator: Accelerator
    num_gpus: int = Field(ge=1, le=MAX_GPUS)
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)
    network: Network = Field(default_factory=Network)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    def node_of(self, gpu_id: int) -> int:
        if isinstance(gpu_id, bool) or not isinstance(gpu_id, int) or not 0 <= gpu_id < self.num_gpus:
            raise PdagInputError("gpu_id", f"GPU id {gpu_id!r} out of range", f"0..{self.num_gpus - 1}")
        return gpu_id // self.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs that reach each other over NVLink: the accelerator's NVLink domain (an NVL72 rack of 4-GPU
        trays) when it is larger than a node, else one node."""
        domain = self.accelerator.nvlink_domain_gpus or self.gpus_per_node
        return max(domain, self.gpus_per_node)

    def domain_of(self, gpu_id: int) -> int:
        return self.node_of(gpu_id) * self.gpus_per_node // self.nvlink_domain

    def link_between(self, a: int, b: int) -> Link:
        """The link two GPUs talk over: the scale-up link (NVLink) inside one NVLink domain, else the network."""
        return self.link_for((a, b))

    def crosses_domains(self, gpu_ids: list[int] | tuple[int, ...]) -> bool:
        """A collective over ``gpu_ids`` leaves the NVLink domain (GPU ids beyond the cluster count as leaving)."""
        if max(gpu_ids) >= self.num_gpus:
            return True
        first = self.domain_of(gpu_ids[0])
        return any(self.domain_of(g) != first for g in gpu_ids)

    @property
    def nodes_per_leaf(self) -> int:
        """Nodes one leaf switch reaches without the spine: a rail leaf has one port per node, a top-of-rack
        leaf one port per GPU of each node."""
        ports = self.network.leaf_downlink_ports
        return ports if self.network.rails else max(1, ports // self.gpus_per_node)

    def link_for(self, gpu_ids: list[int] | tuple[int, ...]) -> Link:
        """The slowest link a collective over ``gpu_ids`` crosses: NVLink inside one NVLink domain (wide EP in
        an NVL72 rack stays on it), else the network as the fabric routes it: under one leaf as the
        accelerator's inter_node link; across leaves through the spine (two more switch traversals, bandwidth
        divided by the oversubscription); on rails, a peer of another local rank is reached through an NVLink
        hop to the GPU on its rail."""
        domains = {self.domain_of(g) for g in gpu_ids}
        if len(domains) <= 1:
            return self.accelerator.intra_node.for_group(len(set(gpu_ids)))
        net, nw = self.accelerator.inter_node, self.network
        extra_us, share = 0.0, 1.0
        if len({self.node_of(g) // self.nodes_per_leaf for g in gpu_ids}) > 1:
            extra_us += 2 * nw.switch_latency_us
            share = 1 / nw.spine_oversubscription
        if nw.rails and len({g % self.gpus_per_node for g in gpu_ids}) > 1:
            extra_us += self.accelerator.intra_node.latency_us
        if not extra_us and share == 1.0:
            return net
        return Link(kind=net.kind, bandwidth_bytes_per_s=net.bandwidth_bytes_per_s * share,
                    latency_us=net.latency_us + extra_us)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict[str, Any]]:
    with open(HARDWARE_FILE, encoding="utf-8") as f:
        return json.load(f)["accelerators"]


def accelerator_ids() -> list[str]:
    return sorted(_catalog())


@cache
def _load(key: str) -> Accelerator:
    return Accelerator.model_validate({"id": key, **_catalog()[key]})


_VENDOR_WORDS = frozenset({"nvidia", "amd", "instinct", "geforce", "tesla", "gpu"})
_FORM_TOKENS = {"sxm4": "sxm", "sxm5": "sxm", "sxm6": "sxm"}


def _tokens(text: str) -> frozenset[str]:
    """The words of an accelerator name, lower-case, with SXM generations read as SXM."""
    words = re.split(r"[\s_/()\-]+", text.lower())
    return frozenset(_FORM_TOKENS.get(w, w) for w in words if w)


@lru_cache(maxsize=1)
def _name_tokens() -> dict[str, frozenset[str]]:
    """Each preset's words: its id's and its catalog name's."""
    return {key: _tokens(key) | _tokens(entry.get("name", "")) for key, entry in _catalog().items()}


def accelerator_id(name: str, *, field: str = "gpu") -> str:
    """The preset id a user's name for an accelerator means: the id itself (any case, spaces or underscores for
    dashes, dashes left out), or the words of one preset's id and catalog name (``H100 SXM``, ``A100-SXM4-80GB``,
    ``NVIDIA L40S``).  A name several presets fit (``h100``: SXM or PCIe) or none fits is an error naming the
    closest presets, never a silent pick: the forms differ in memory bandwidth and interconnect."""
    if not isinstance(name, str):
        raise PdagInputError(field, f"expected an accelerator id, got {type(name).__name__}",
                             "presets: " + ", ".join(accelerator_ids()))
    key = name[:MAX_MATCHED * 2].strip().lower()
    catalog = _catalog()
    if key in catalog:
        return key
    squashed = {k.replace("-", ""): k for k in catalog}
    dashed = re.sub(r"[\s_]+", "-", key)
    if dashed in catalog or key.replace("-", "").replace(" ", "") in squashed:
        return dashed if dashed in catalog else squashed[key.replace("-", "").replace(" ", "")]
    words = _tokens(key) - _VENDOR_WORDS
    fits = sorted(k for k, t in _name_tokens().items() if words and words <= t)
    if len(fits) == 1:
        return fits[0]
    described = ", ".join(f"{k} ({catalog[k].get('name', k)})" for k in fits)
    if fits:
        raise PdagInputError(field, f"{shown(name)} names {len(fits)} accelerator presets", "one of: " + described)
    shared = {k: len(words & t - _VENDOR_WORDS) for k, t in _name_tokens().items()}
    near = sorted((k for k in shared if shared[k]), key=lambda k: (-shared[k], k))
    raise PdagInputError(field, f"unknown accelerator {shown(name)}",
                         "closest presets: " + ", ".join(near[:MAX_SHOWN_PRESETS] or closest(key, accelerator_ids()))
                         + "; or an inline accelerator object stating its figures")


MAX_SHOWN_PRESETS = 6  # presets named in an unknown-accelerator error


def load_accelerator(id: str, *, field: str = "gpu") -> Accelerator:  # noqa: A002
    """A catalog accelerator by id or by a name that fits one preset (``accelerator_id``)."""
    return _load(accelerator_id(id, field=field))


def resolve_accelerator(gpu: str | dict[str, Any] | Accelerator, *, field: str = "gpu") -> Accelerator:
    """A preset id, an inline accelerator object (validated), or an Accelerator."""
    if isinstance(gpu, Accelerator):
        return gpu
    if isinstance(gpu, str):
        return load_accelerator(gpu, field=field)
    if isinstance(gpu, dict):
        data = dict(gpu)
        data.setdefault("id", str(data.get("name") or "custom"))
        data.setdefault("name", data["id"])
        try:
            return Accelerator.model_validate(data)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in err.get("loc", ()))
            ctx = err.get("ctx") or {}
            bounds = ", ".join(f"{k} {v}" for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
            allowed = bounds or ("see the accelerator schema" if err.get("type") != "missing" else "required")
            raise PdagInputError(f"{field}.{loc}" if loc else field, err["msg"], allowed) from None
    raise PdagInputError(field, f"cannot use {type(gpu).__name__} as an accelerator",
                         "a preset id (e.g. h100-sxm) or an inline accelerator object")
