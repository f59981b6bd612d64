"""Hardware catalog: presets, sources for every figure, dtype support, cluster geometry, input errors."""

from __future__ import annotations

import pytest

from tools.core.errors import PdagInputError
from tools.core.hardware import (
    DTYPE_BYTES,
    Accelerator,
    Cluster,
    accelerator_ids,
    load_accelerator,
    resolve_accelerator,
)

REQUIRED = ["a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "mi300x"]
FIGURES = [
    "memory_bytes", "memory_bandwidth_bytes_per_s", "dense_tflops.bf16", "dense_tflops.fp16",
    "dense_tflops.fp8", "dense_tflops.int8", "dense_tflops.int4", "intra_node.bandwidth_bytes_per_s",
    "intra_node.latency_us", "inter_node.bandwidth_bytes_per_s", "inter_node.latency_us", "max_gpus_per_node",
]

INLINE = {
    "name": "My GPU",
    "memory_bytes": 64_000_000_000,
    "memory_bandwidth_bytes_per_s": 2.0e12,
    "dense_tflops": {"bf16": 400, "fp16": 400, "fp8": 800},
    "intra_node": {"kind": "nvlink", "bandwidth_bytes_per_s": 2.0e11, "latency_us": 2},
    "inter_node": {"kind": "infiniband", "bandwidth_bytes_per_s": 2.5e10, "latency_us": 5},
}


def test_dtype_bytes() -> None:
    assert DTYPE_BYTES == {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


def test_required_presets_present() -> None:
    assert set(REQUIRED) <= set(accelerator_ids())


@pytest.mark.parametrize("gid", accelerator_ids())
def test_preset_loads_with_sources(gid: str) -> None:
    acc = load_accelerator(gid)
    assert acc.id == gid
    assert acc.memory_bytes > 10**10 and acc.memory_bandwidth_bytes_per_s > 1e11
    assert set(FIGURES) <= set(acc.sources)
    for fig in FIGURES:
        src = acc.sources[fig]
        assert src.startswith("https://") or src.startswith("assumption:"), (fig, src)
    # vendor figures come from the vendor
    for fig in ("memory_bytes", "memory_bandwidth_bytes_per_s", "dense_tflops.bf16"):
        assert acc.sources[fig].startswith("https://")
    assert acc.intra_node.bandwidth_bytes_per_s > acc.inter_node.bandwidth_bytes_per_s
    assert acc.peak_flops("bf16") > 5e13  # A10G: 70 TFLOPS


@pytest.mark.parametrize("gid", accelerator_ids())
def test_bf16_below_fp8_where_both_exist(gid: str) -> None:
    acc = load_accelerator(gid)
    if acc.supports("fp8"):
        assert acc.peak_flops("bf16") < acc.peak_flops("fp8")
        assert acc.peak_flops("fp8") == pytest.approx(2 * acc.peak_flops("bf16"), rel=0.02)


def test_a100_has_no_fp8() -> None:
    acc = load_accelerator("a100-80gb")
    assert acc.dense_tflops.fp8 is None
    assert not acc.supports("fp8")
    with pytest.raises(PdagInputError) as info:
        acc.peak_flops("fp8")
    assert info.value.field == "dtype" and "bf16" in (info.value.allowed or "")
    with pytest.raises(PdagInputError):
        acc.peak_flops("fp64")


def test_dense_not_sparse_figures() -> None:
    assert load_accelerator("h100-sxm").peak_flops("bf16") == pytest.approx(989.5e12)
    assert load_accelerator("a100-80gb").peak_flops("bf16") == pytest.approx(312e12)
    assert load_accelerator("mi300x").peak_flops("fp8") == pytest.approx(2614.9e12)
    assert load_accelerator("h100-sxm").intra_node.bandwidth_bytes_per_s == pytest.approx(450e9)


def test_case_insensitive_and_closest_ids() -> None:
    assert load_accelerator("H100-SXM") is load_accelerator("h100-sxm")
    with pytest.raises(PdagInputError) as info:
        load_accelerator("h100")
    err = info.value
    assert err.field == "gpu" and "h100" in err.problem
    assert err.allowed and err.allowed.startswith("one of:")  # SXM or PCIe: no silent pick
    assert {"h100-sxm", "h100-pcie"} <= set(err.allowed.split(" "))
    with pytest.raises(PdagInputError) as info:
        load_accelerator("h100-nvl")
    assert info.value.allowed.startswith("closest presets: h100-")


def test_inline_accelerator_validated() -> None:
    acc = resolve_accelerator(INLINE)
    assert isinstance(acc, Accelerator) and acc.name == "My GPU"
    assert acc.peak_flops("fp8") == 800e12
    assert not acc.supports("int8")
    bad = dict(INLINE, memory_bytes=-1)
    with pytest.raises(PdagInputError) as info:
        resolve_accelerator(bad)
    assert info.value.field == "gpu.memory_bytes"
    missing = {k: v for k, v in INLINE.items() if k != "intra_node"}
    with pytest.raises(PdagInputError) as info:
        resolve_accelerator(missing)
    assert info.value.field == "gpu.intra_node"
    with pytest.raises(PdagInputError) as info:
        resolve_accelerator(dict(INLINE, warp_drive=True))
    assert info.value.field == "gpu.warp_drive"
    with pytest.raises(PdagInputError) as info:
        resolve_accelerator(dict(INLINE, dense_tflops={}))
    assert info.value.field.startswith("gpu")
    with pytest.raises(PdagInputError):
        resolve_accelerator(3.5)  # type: ignore[arg-type]


def test_cluster_geometry() -> None:
    acc = load_accelerator("h100-sxm")
    c = Cluster(accelerator=acc, num_gpus=20)
    assert c.gpus_per_node == 8 and c.num_nodes == 3
    assert [c.node_of(g) for g in (0, 7, 8, 19)] == [0, 0, 1, 2]
    assert c.link_between(0, 7).kind == "nvlink"
    assert c.link_between(7, 8).kind == "infiniband"
    assert c.link_for([0, 1, 2]) is acc.intra_node and c.link_for([0, 8]) is acc.inter_node  # same rail
    with pytest.raises(PdagInputError):
        c.node_of(20)
    with pytest.raises(ValueError):
        Cluster(accelerator=acc, num_gpus=0)
    with pytest.raises(ValueError):
        Cluster(accelerator=acc, num_gpus=8, gpus_per_node=73)
    with pytest.raises(ValueError):
        Cluster(accelerator=acc, num_gpus=70_000)
    assert Cluster(accelerator=load_accelerator("gb200"), num_gpus=72, gpus_per_node=72).num_nodes == 1


def test_nvl72_racks_keep_tp_and_wide_ep_on_nvlink():
    from tools import estimate_performance, validate_dag
    from tools.core.plan import parse_plan

    for gpu in ("gb200", "gb300"):
        plan = {"model": "deepseek-v3", "dtype": "fp8", "hardware": {"gpu": gpu, "num_gpus": 72, "gpus_per_node": 4},
                "parallel": {"tp": 16, "ep": 64}}
        cluster = parse_plan(plan).cluster
        assert cluster.nvlink_domain == 72
        assert cluster.link_for(list(range(64))).kind == "nvlink"
        assert cluster.link_for([0, 71]).kind == "nvlink"
        rules = {v.rule_id for v in validate_dag(plan=plan).violations}
        assert "TP-WITHIN-NODE" not in rules
        eight = {**plan, "hardware": {"gpu": "b200", "num_gpus": 72, "gpus_per_node": 4}}
        assert "TP-WITHIN-NODE" in {v.rule_id for v in validate_dag(plan=eight).violations}
        assert parse_plan(eight).cluster.link_for([0, 4]).kind != "nvlink"
        # the same GPU without the rack-wide domain: its EP all-to-all leaves the 4-GPU node and is slower
        from tools.core.hardware import load_accelerator

        trays = load_accelerator(gpu).model_dump(exclude={"nvlink_domain_gpus", "sources"})
        trays["id"] = f"{gpu}-trays-only"
        rack = estimate_performance(plan).decode_latency_ms_per_token
        apart = estimate_performance({**plan, "hardware": {**plan["hardware"], "gpu": trays}})
        assert rack < apart.decode_latency_ms_per_token


NEW_IN_ISSUE_39 = ["a10g", "l4", "l20", "h20", "h800", "a800", "mi355x", "mi350x", "b300", "rtx-pro-6000"]


def test_issue_39_accelerators_present() -> None:
    assert set(NEW_IN_ISSUE_39) <= set(accelerator_ids())


@pytest.mark.parametrize("gid", accelerator_ids())
def test_memory_in_the_vendors_unit(gid: str) -> None:
    """Every entry stores the vendor's stated capacity in bytes of the unit it names (80 GB = 80e9, never a
    driver total); the driver's figure, where a paste gives it, sits apart in whole MiB and is what checks use."""
    acc = load_accelerator(gid)
    unit = 10**9 if acc.memory_unit == "GB" else 2**30
    stated = acc.memory_bytes / unit
    assert stated == pytest.approx(round(stated, 1), abs=1e-9), (gid, stated)  # a figure a datasheet prints
    assert acc.sources["memory_bytes"].startswith("https://")
    if acc.driver_memory_bytes is not None:
        assert acc.driver_memory_bytes % 2**20 == 0, gid  # nvidia-smi / rocm-smi totals are whole MiB
        assert 0.9 < acc.driver_memory_bytes / acc.memory_bytes < 1.1, gid
        assert acc.sources["driver_memory_bytes"].startswith("https://")
        assert acc.capacity_bytes == acc.driver_memory_bytes
    else:
        assert acc.capacity_bytes == acc.memory_bytes
    assert "GiB" in acc.memory_label() and acc.memory_unit in acc.memory_label()


def test_driver_totals_kept_as_capacity() -> None:
    """Moving the vendor's GB into memory_bytes must not move a capacity check: H100's budget stays 81559 MiB."""
    h100 = load_accelerator("h100-sxm")
    assert h100.memory_bytes == 80 * 10**9
    assert h100.capacity_bytes == 81559 * 2**20
    assert h100.memory_label() == "80 GB (driver: 79.6 GiB)"
    assert load_accelerator("mi300x").capacity_bytes == 206_141_652_992  # rocm-smi, bytes


def test_fp4_native_accelerators_state_an_fp4_peak() -> None:
    from tools.core.formats import fp4_native

    for gid in fp4_native():
        acc = load_accelerator(gid)
        assert acc.dense_tflops.fp4 is not None and acc.dense_tflops.fp4 > acc.dense_tflops.fp8, gid  # type: ignore[operator]
        assert "dense_tflops.fp4" in acc.sources


def test_mi350x_is_mi355x_at_its_lower_clock() -> None:
    """MI350X: MI355X's 256 compute units, memory and links at a 2.2 GHz peak clock instead of 2.4 GHz, so each
    dense peak is MI355X's scaled by 2.2 / 2.4; SGLang's cookbook serves Kimi-K2.5 on 4 of them."""
    from tools.engines.launch import import_command
    from tools.estimate.core import estimate_performance

    mi350, mi355 = load_accelerator("mi350x"), load_accelerator("mi355x")
    assert mi350.memory_bytes == mi355.memory_bytes == 288 * 10**9
    assert mi350.intra_node == mi355.intra_node
    for dtype in ("bf16", "fp8", "int8"):
        assert mi350.peak_flops(dtype) == pytest.approx(mi355.peak_flops(dtype) * 2.2 / 2.4, rel=1e-4)
    assert mi350.dense_tflops.fp4 == pytest.approx(mi355.dense_tflops.fp4 * 2.2 / 2.4, rel=1e-4)  # type: ignore[operator]
    assert all(url.startswith("https://www.amd.com/") for key, url in mi350.sources.items()
               if key.startswith(("memory", "dense_tflops")))
    plan = import_command("sglang serve --model-path moonshotai/Kimi-K2.5 --tp 4 --mem-fraction-static 0.8 "
                          "--trust-remote-code", gpu="mi350x").plan
    assert plan["hardware"]["gpu"] == "mi350x" and plan["parallel"]["tp"] == 4
    assert estimate_performance(plan).memory.fits


def test_export_cut_parts_keep_their_cut_links() -> None:
    """H800 and A800 are H100 and A100 with NVLink cut to 400 GB/s both ways; H20 keeps H100's NVLink but a
    fraction of its compute."""
    h100, h800, h20 = (load_accelerator(g) for g in ("h100-sxm", "h800", "h20"))
    assert h800.intra_node.bandwidth_bytes_per_s == 200e9 < h100.intra_node.bandwidth_bytes_per_s
    assert h800.peak_flops("bf16") == h100.peak_flops("bf16")
    assert h20.intra_node.bandwidth_bytes_per_s == h100.intra_node.bandwidth_bytes_per_s
    assert h20.peak_flops("fp8") < h100.peak_flops("fp8") / 6
    assert load_accelerator("a800").intra_node.bandwidth_bytes_per_s == 200e9
