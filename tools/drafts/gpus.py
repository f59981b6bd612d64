"""GPU ids as hand drafts write them: numbers, ``"cuda:3"``, ranges, machine-local ids (``"node1/gpu3"``, or a
machine the draft names in its hardware's ``hosts``), and places on a device mesh the draft declares (axis and
coordinate).  ``tools.drafts.dialect`` reads a draft's devices through these."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from tools.drafts.vocabulary import is_int, key, words


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Machine-local ids ("node1/gpu3"), named-host ids ("pnode:gpu0-3") and a GPU word inside a text, from the
    vocabulary's words for a GPU and for a machine."""
    gpu = "|".join(sorted(words("gpu_words"), key=len, reverse=True))
    machine = "|".join(sorted(words("machine_words"), key=len, reverse=True))
    return (re.compile(rf"(?:{machine})\s*(\d+)\s*[/:.,_-]?\s*(?:{gpu})\s*(\d+)"),
            re.compile(rf"([a-z][a-z0-9_]*?)\s*[:/]\s*(?:(?:{gpu})\s*:?)?\s*(\d+)(?:\s*(?:-|\.\.)\s*(\d+))?"),
            re.compile("|".join(sorted(words("gpu_words") - {"g"}, key=len, reverse=True))))


def device_list(value: Any, gpus_per_node: int = 8, hosts: dict[str, int] | None = None) -> list[int] | None:
    """GPU ids from the ways drafts write them: 3, "gpu3", "cuda:3", "0-7", "gpu0..gpu7", "cuda:0,cuda:1",
    "node1/gpu3" (a machine's local GPU, with ``gpus_per_node``), "pnode:gpu0-3" (a machine the draft names in its
    hardware's ``hosts``, by position), a list of these, or an object holding one of them under a
    ``device_object_fields`` key (``gpus``, ``ids``, ``ranks``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value] if value >= 0 else None
    if isinstance(value, str):
        text = value.strip().lower()
        ends = re.split(r"\s*(?:->|=>|\u2192)\s*", text)
        if len(ends) == 2 and all(ends):  # "gpu[0..3] -> gpu[0]": a collective's sources and destination
            got = [device_list(e, gpus_per_node, hosts) for e in ends]
            return None if None in got else sorted({i for g in got for i in g or []})
        parts = [t for t in re.split(r"[,;\s]+(?![^\[]*\])", text) if t]
        if len(parts) > 1 and all(re.search(r"\d", t) for t in parts):  # "cuda:0,cuda:1", "gpu0 gpu1", not "GPU 2"
            return device_list(parts, gpus_per_node, hosts)
        machine_gpu, host_gpu, gpu_word = _patterns()
        named = host_gpu.fullmatch(text) if hosts else None
        if named and hosts and named.group(1) in hosts:
            base = hosts[named.group(1)] * gpus_per_node
            lo = int(named.group(2))
            hi = int(named.group(3)) if named.group(3) else lo
            return [base + i for i in range(lo, hi + 1)] if lo <= hi < gpus_per_node else None
        if named and named.group(1) not in words("gpu_words"):
            return None  # a machine the draft's hosts do not name: which GPUs is unknown
        local = machine_gpu.fullmatch(text)
        if local:
            return [int(local.group(1)) * gpus_per_node + int(local.group(2))]
        nums = [int(x) for x in re.findall(r"\d+", text)]
        if len(nums) == 2 and re.search(r"\d\s*(-|\.\.|:|to)\s*\D*\d", text) and nums[0] <= nums[1] \
                and not re.search(rf"(?:{gpu_word.pattern})\s*:\s*\d+\s*$", text):
            return list(range(nums[0], nums[1] + 1)) if nums[1] - nums[0] < 100_000 else None
        if len(nums) > 1 and re.search(r"\d\s*[,;]\s*\D*\d", text):  # "gpu[0, 3]"
            return nums
        return nums[-1:] if nums else None
    if isinstance(value, list):
        out: list[int] = []
        for item in value:
            got = device_list(item, gpus_per_node, hosts)
            if got is None:
                return None
            out += got
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            if key(k) in words("device_object_fields"):
                return device_list(v, gpus_per_node, hosts)
    return None


def gpu_text(value: Any, gpus_per_node: int, hosts: dict[str, int]) -> list[int] | None:
    """GPU ids only where the text says GPUs ("gpu0-3", "cuda:1", "node1/gpu2", a named host's "pnode:gpu0-3"),
    so that a field holding node ids ("pf.L0.kv") is never read as GPU 0."""
    machine_gpu, host_gpu, gpu = _patterns()
    items = value if isinstance(value, list) else [value]
    for v in items:
        text = v.strip().lower() if isinstance(v, str) else None
        if not (is_int(v) or (text is not None and (
                gpu.search(text) or machine_gpu.fullmatch(text)
                or ((m := host_gpu.fullmatch(text)) and m.group(1) in hosts)))):
            return None
    return device_list(value, gpus_per_node, hosts)


Mesh = dict[str, list[int]]  # "" -> every GPU of a draft's device mesh, axis name (key form) -> that axis's GPUs


def mesh_of(doc: dict[str, Any], gpus_per_node: int) -> Mesh:
    """A draft's named device mesh (``"mesh": {"devices": [...], "axes": {"tp": {"devices": [...]}}}``), by axis."""
    block = next((v for k, v in doc.items() if key(k) in words("mesh_blocks") and isinstance(v, dict)), None)
    if block is None:
        return {}
    out: Mesh = {}
    every = device_list(block.get("devices"), gpus_per_node) if "devices" in block else None
    axes = block.get("axes") if isinstance(block.get("axes"), dict) else {}
    for name, axis in axes.items():
        got = device_list(axis.get("devices") if isinstance(axis, dict) else None, gpus_per_node)
        if got is None and every is not None:
            got = every  # an axis given by its size only spans the mesh
        if got is not None:
            out[key(name)] = got
    if every is None and out:
        every = sorted({g for ids in out.values() for g in ids})
    if every is not None:
        out[""] = every
    return out


def mesh_place(devs: Any, mesh: Mesh) -> list[int] | None:
    """A placement on the mesh: ``{"mesh_axis": "tp", "coord": 1}`` is the axis's second GPU, without a coordinate
    every GPU of the axis; ``{"replicated_on": "mesh"}`` every GPU of the mesh."""
    if not mesh or not isinstance(devs, dict):
        return None
    fields = {key(k): v for k, v in devs.items()}
    if any(f in fields for f in words("mesh_everywhere_fields")):
        return mesh.get("")
    axis = next((fields[f] for f in words("mesh_axis_fields") if isinstance(fields.get(f), str)), None)
    if axis is None or key(axis) not in mesh:
        return None
    ids = mesh[key(axis)]
    coord = next((fields[f] for f in words("mesh_coord_fields") if f in fields), None)
    if coord is None:
        return list(ids)
    picks = coord if isinstance(coord, list) else [coord]
    if not all(is_int(c) and 0 <= c < len(ids) for c in picks):
        return None
    return [ids[c] for c in picks]


def node_local(devs: Any, gpus_per_node: int) -> list[int] | None:
    """``{"node": 1, "local_gpus": [0, 1]}`` (a machine and its GPUs, or a list of such) as global GPU ids."""
    if isinstance(devs, list) and devs and all(isinstance(d, dict) for d in devs):
        parts = [node_local(d, gpus_per_node) for d in devs]
        return None if any(p is None for p in parts) else sorted({i for p in parts for i in p or []})
    if not isinstance(devs, dict):
        return None
    machine = next((v for k, v in devs.items() if key(k) in words("machine_index_fields") and is_int(v)), None)
    local = next((v for k, v in devs.items() if key(k) in words("local_gpu_fields")), None)
    ids = device_list(local, gpus_per_node) if local is not None else None
    if machine is None or ids is None:
        return None
    return sorted({machine * gpus_per_node + i for i in ids})


def _hardware_blocks(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Where a draft states its machines: the document, its plan and metadata blocks, and their ``hardware``."""
    blocks = [doc] + [v for k, v in doc.items() if (k == "plan" or key(k) in words("metadata_blocks"))
                      and isinstance(v, dict)]
    for b in blocks:
        yield b
        if isinstance(b.get("hardware"), dict):
            yield b["hardware"]


def gpus_per_node_of(doc: dict[str, Any]) -> int:
    """GPUs per machine, where a draft says it (its plan, hardware or metadata block), for machine-local GPU ids."""
    for hw in _hardware_blocks(doc):
        v = hw.get("gpus_per_node")
        if is_int(v) and v >= 1:
            return int(v)
    return 8


def hosts_of(doc: dict[str, Any]) -> dict[str, int]:
    """Machines a draft names (``"hardware": {"hosts": ["pnode (prefill)", "dnode"]}``), by position: "pnode:gpu2"
    is then machine 0's third GPU."""
    for hw in _hardware_blocks(doc):
        names = next((v for k, v in hw.items() if key(k) in words("host_list_fields")), None)
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            firsts = [re.split(r"[\s(]", n.strip().lower(), maxsplit=1)[0] for n in names]
            if len(set(firsts)) == len(firsts):
                return {n: i for i, n in enumerate(firsts)}
    return {}


def hosts_in_ids(nodes: Any) -> dict[str, int]:
    """Machines a draft names only inside its GPU ids ("nodeA:cuda:3", "nodeB:cuda:0-7"), numbered in the order
    they first appear (a draft lists its first machine first); none when an id names a machine by number."""
    machine_gpu, host_gpu, _ = _patterns()
    names: dict[str, int] = {}

    def scan(v: Any) -> None:
        for item in v if isinstance(v, list) else [v]:
            text = item.strip().lower() if isinstance(item, str) else ""
            m = host_gpu.fullmatch(text)
            if m and not machine_gpu.fullmatch(text) and m.group(1) not in words("gpu_words"):
                names.setdefault(m.group(1), len(names))

    for n in nodes if isinstance(nodes, list) else []:
        for v in n.values() if isinstance(n, dict) else []:
            scan(v)
    return names
