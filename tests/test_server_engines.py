"""The engine fronts over MCP: import_deployment (a launch command -> a checked plan) and export_plan (a plan -> the
engine's command), as an agent in Claude Desktop calls them."""

from __future__ import annotations

import json
import shlex

import anyio
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from server import create_server
from server import responses as R
from tools import import_deployment

pytestmark = pytest.mark.anyio

LLAMA_TP8 = "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8"
# GPUStack's performance lab: this command fails to load (192-wide expert shards of 128-wide fp8 blocks)
QWEN_FP8_TP8 = "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 8"
DYNAMO = "python3 -m dynamo.trtllm --model-path Qwen/Qwen3-235B-A22B-FP8 --tensor-parallel-size {tp}{ep} " \
         "--disaggregation-mode {mode}"


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def call(name: str, args: dict) -> tuple[bool, dict | str]:
    async with Client(create_server(), mode="legacy") as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        r = await c.call_tool(name, args)
    text = r.content[0].text
    assert "Traceback" not in text and "internal error" not in text, text
    if r.is_error:
        return False, text
    jsonschema.validate(r.structured_content, schemas[name])
    assert json.loads(text) == r.structured_content
    return True, r.structured_content


async def test_import_gives_the_core_plan_and_its_validity():
    ok, data = await call("import_deployment", {"command": LLAMA_TP8, "gpu": "h100-sxm"})
    assert ok and data["valid"] and data["error_count"] == 0 and data["engine"] == "vllm"
    assert data["plan"] == import_deployment(LLAMA_TP8, gpu="h100-sxm").plan
    assert data["plan"]["parallel"]["tp"] == 8 and data["plan"]["hardware"]["num_gpus"] == 8


async def test_import_flags_a_command_the_engine_refuses():
    ok, data = await call("import_deployment", {"command": QWEN_FP8_TP8, "gpu": "h200"})
    assert ok and not data["valid"] and data["error_count"] >= 1
    assert "TP-QUANT-BLOCK-SHARD" in [v["rule_id"] for v in data["violations"]]
    assert "autofix_dag" in data["note"]


async def test_import_full_detail_lists_violations_one_by_one():
    ok, data = await call("import_deployment", {"command": QWEN_FP8_TP8, "gpu": "h200", "detail": "full"})
    assert ok and all("count" not in v for v in data["violations"])
    assert sum(v["severity"] == "error" for v in data["violations"]) == data["error_count"]


async def test_import_of_a_disaggregated_deployment_with_replicas_and_a_shared_config():
    pre = DYNAMO.format(tp=2, ep="", mode="prefill")
    dec = DYNAMO.format(tp=4, ep=" --expert-parallel-size 4", mode="decode")
    config = {"kv_cache_config": {"dtype": "fp8"}}
    ok, data = await call("import_deployment", {"command": pre, "decode_command": dec, "gpu": "h200", "replicas": 6,
                                                "engine_config": config})
    assert ok, data
    plan = data["plan"]
    assert plan["options"]["disaggregated"] and plan["hardware"]["num_gpus"] == 6 * 2 + 4
    assert plan["parallel"]["dp"] == 6 and plan["phases"]["decode"]["ep"] == 4
    assert plan["kv_dtype"] == "fp8"  # the decode pool read the prefill pool's YAML too, else the dtypes would differ
    assert plan == import_deployment(pre, gpu="h200", replicas=6, engine_config=config, decode_command=dec).plan


@pytest.mark.parametrize(("args", "needle"), [
    ({"command": "vllm serve someone/unknown-13b -tp 8"}, "command.model"),
    ({"command": LLAMA_TP8, "gpu": "h900"}, "gpu"),
    ({"command": LLAMA_TP8, "replicas": 0}, "replicas"),
    ({"command": ""}, "command"),
    ({"command": LLAMA_TP8, "bogus": 1}, "bogus"),
])
async def test_import_errors_name_the_field(args, needle):
    ok, text = await call("import_deployment", args)
    assert not ok and needle in text and "Allowed" in text


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
async def test_exported_commands_import_back_to_the_plan(engine):
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 4, "dp": 2},
            "objective": "throughput"}
    ok, data = await call("export_plan", {"plan": plan, "engine": engine})
    assert ok and data["valid"] and data["engine"] == engine and "argv" not in data
    lines = [line for line in data["command"].splitlines() if line and not line.startswith("#")]
    first = shlex.split(lines[0])
    while "=" in first[0]:  # a CUDA_VISIBLE_DEVICES= prefix of a pinned server
        first = first[1:]
    back = await call("import_deployment", {"command": shlex.join(first), "gpu": "h100-sxm",
                                            "engine_config": data.get("config"), "replicas": len(lines)})
    assert back[0], back[1]
    parallel = back[1]["plan"]["parallel"]
    assert (parallel["tp"], parallel["dp"], back[1]["plan"]["hardware"]["num_gpus"]) == (4, 2, 8)


async def test_export_full_detail_adds_argv():
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "engine": "sglang"}
    ok, data = await call("export_plan", {"plan": plan, "detail": "full"})
    assert ok and data["argv"] and data["argv"][0][:3] == ["python", "-m", "sglang.launch_server"]


async def test_export_says_when_a_plan_breaks_rules_or_cannot_be_launched():
    bad = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
           "workload": {"input_len": 4096, "output_len": 256, "batch_size": 4096}}
    ok, text = await call("export_plan", {"plan": bad, "engine": "vllm"})  # refused, naming the violations
    assert not ok and "MEM-FITS" in text and "force" in text
    ok, data = await call("export_plan", {"plan": bad, "engine": "vllm", "force": True})
    assert ok and not data["valid"] and "MEM-FITS" in {v["rule_id"] for v in data["violations"]}
    assert any(n.startswith("forced:") for n in data["notes"])
    ok, text = await call("export_plan", {"plan": {**bad, "engine": "generic", "workload": {"batch_size": 1}}})
    assert not ok and "names no engine" in text and "vllm, sglang, trtllm" in text
    ok, text = await call("export_plan", {"plan": {"model": "nope", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}},
                                          "engine": "vllm"})
    assert not ok and "plan.model" in text


pieces = st.sampled_from(["vllm", "serve", "python", "-m", "sglang.launch_server", "trtllm-serve", "--tp", "-tp",
                          "--tensor-parallel-size", "8", "0", "-1", "99999999999999999999", "--model-path",
                          "meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V3", "--ep", "--dp",
                          "--enable-dp-attention", "--config", "x.yaml", "'", '"', "\\", "=", "--kv-cache-dtype",
                          "fp8", "--quantization", "nvfp4", "dynamo.vllm", "--disaggregation-mode", "decode"])
commands = st.lists(pieces | st.text(max_size=6), min_size=1, max_size=12).map(" ".join)
configs = st.none() | st.dictionaries(st.sampled_from(["tp_size", "tensor_parallel_size", "kv_cache_config",
                                                       "enable_attention_dp", "moe_expert_parallel_size", "x"]),
                                      st.integers(-2, 16) | st.booleans() | st.text(max_size=4)
                                      | st.dictionaries(st.just("dtype"), st.sampled_from(["fp8", "auto", 3])),
                                      max_size=3)


@pytest.mark.slow  # 40 fuzzed commands, each estimated: ~7 s; .ci/run runs it
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=commands, decode=st.none() | commands, config=configs)
def test_any_command_gives_a_checked_plan_or_a_field_error(command, decode, config):
    args = {"command": command, "engine_config": config} | ({"decode_command": decode} if decode else {})
    ok, data = anyio.run(call, "import_deployment", args)
    if ok:
        R.ImportAnswer.model_validate(data)
        assert data["valid"] == (data["error_count"] == 0)
    else:
        assert "invalid `" in data


def test_import_takes_the_users_workload_and_objective() -> None:
    """A command states no load and no goal: the recorded agents re-added both by hand after every import."""
    from tools.core.errors import PdagInputError
    from tools.engines.launch import import_deployment

    cmd = "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 -pp 2 --max-num-seqs 128"
    bare = import_deployment(cmd)
    assert "workload" not in bare.plan and "objective" not in bare.plan
    assert any("the default workload (1 x 2048 in / 256 out" in n and "objective latency" in n for n in bare.notes)
    given = import_deployment(cmd, workload={"input_len": 4096, "output_len": 512, "concurrency": 64},
                              objective="throughput")
    assert given.plan["workload"] == {"input_len": 4096, "output_len": 512, "concurrency": 64}
    assert given.plan["objective"] == "throughput"
    assert not any("default workload" in n for n in given.notes)
    with pytest.raises(PdagInputError) as exc:
        import_deployment(cmd, objective="cheapest")
    assert exc.value.field == "objective"
