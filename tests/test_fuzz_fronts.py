"""Fuzzing the fronts (bounded for CI, ~20-30 s): the Python API, one stdio session and the CLI.

Hostile values (deep nesting, lone surrogates, non-finite and extreme numbers, huge integers, wrong types)
must give a result or a field-naming error: zero tracebacks, zero unanswered requests, and every structured
answer within the output schema its tool declares (and within the full pydantic answer model)."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from server import create_server
from server import responses as R
from tools import autofix_dag, build_dag, estimate_performance, lookup_rule, validate_dag
from tools.cli import main
from tools.core.errors import PdagInputError

ROOT = Path(__file__).resolve().parent.parent
BASE = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 4, "ep": 4},
        "workload": {"input_len": 512, "output_len": 32, "batch_size": 2}}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"x": value}
    return value


hostile_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**40, 10**40), st.sampled_from([2**63, -(2**63), 10**29]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-300, -1e-300, 5e-324, 1.7e308]),
    st.text(max_size=8), st.sampled_from(["\ud800", "a\udfffb", "", "8", "tp", "h100-sxm"]),
)
hostile = st.recursive(hostile_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8) \
    | st.integers(60, 120).map(nested)
paths = st.sampled_from([
    ("model",), ("model", "hf_config"), ("model", "hf_config", "num_attention_heads"), ("hardware",),
    ("hardware", "gpu"), ("hardware", "gpu", "memory_bandwidth_bytes_per_s"), ("hardware", "num_gpus"),
    ("hardware", "gpus_per_node"), ("parallel", "tp"), ("parallel", "ep"), ("parallel", "pp"), ("parallel", "dp"),
    ("parallel", "attn_dp"), ("phases", "prefill", "sp"), ("workload", "input_len"), ("workload", "batch_size"),
    ("dtype",), ("options", "layer_split"), ("options", "disaggregated"), ("bogus",),
])
GPU = {"id": "g", "name": "g", "memory_bytes": 80 * 10**9, "memory_bandwidth_bytes_per_s": 3.3e12,
       "dense_tflops": {"bf16": 990}, "intra_node": {"kind": "nvlink", "bandwidth_bytes_per_s": 4.5e11,
                                                     "latency_us": 1},
       "inter_node": {"kind": "infiniband", "bandwidth_bytes_per_s": 5e10, "latency_us": 5}}


def mutate(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    plan = copy.deepcopy(BASE)
    if path[:2] == ("hardware", "gpu") and len(path) > 2:
        plan["hardware"]["gpu"] = copy.deepcopy(GPU)
    if path[:2] == ("model", "hf_config") and len(path) > 2:
        plan["model"] = {"hf_config": {"num_attention_heads": 32}}
    node = plan
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return plan


def survives(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except PdagInputError as exc:
        assert exc.field and exc.problem


@FAST
@given(path=paths, value=hostile)
def test_api_never_raises_anything_but_a_field_error(path, value):
    plan = mutate(path, value)
    survives(build_dag, plan)
    survives(validate_dag, plan=plan)
    survives(estimate_performance, plan=plan)
    survives(autofix_dag, plan=plan)


@FAST
@given(kwargs=st.dictionaries(st.sampled_from(["rule_id", "query", "strategy", "phase", "node_type", "layer",
                                               "limit"]), hostile, max_size=3))
def test_lookup_rule_from_python_never_crashes(kwargs):
    survives(lookup_rule, **kwargs)


# ------------------------------------------------------------------------------------------- MCP, in process
ANSWERS = {"build_dag": R.BuildAnswer, "validate_dag": R.ValidateAnswer, "autofix_dag": R.AutofixAnswer,
           "estimate_performance": R.EstimateAnswer}


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError, RecursionError):
        return False
    return True


_LISTING: dict[str, Any] = {}


async def _call_checked(name: str, plan: dict[str, Any], detail: str) -> bool:
    """One call in process (legacy mode: JSON-RPC framing); True when it answered (not a tool error)."""
    async with Client(create_server(), mode="legacy") as c:
        if not _LISTING:
            _LISTING.update({t.name: t.output_schema for t in (await c.list_tools()).tools})
        r = await c.call_tool(name, {"plan": plan, "detail": detail})
    text = r.content[0].text
    assert "internal error" not in text and "Traceback" not in text, (name, plan, text)
    if r.is_error:
        assert "invalid `" in text or "Error executing tool" in text
        return False
    jsonschema.validate(r.structured_content, _LISTING[name])
    ANSWERS[name].model_validate(r.structured_content)
    return True


@pytest.mark.slow  # 40 corpus answers checked against their schemas: ~6 s; .ci/run runs it
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=paths, value=hostile | st.integers(1, 16), name=st.sampled_from(list(ANSWERS)),
       detail=st.sampled_from(["summary", "full"]))
def test_structured_answers_hold_their_output_schemas_over_the_corpus(path, value, name, detail):
    plan = mutate(path, value)
    if _json_safe(plan):  # else it cannot be sent over JSON-RPC at all (the stdio test covers those lines)
        anyio.run(_call_checked, name, plan, detail)


@pytest.mark.parametrize("name", sorted(ANSWERS))
@pytest.mark.parametrize("detail", ["summary", "full"])
def test_valid_and_invalid_plans_answer_within_their_schemas(name, detail):
    for plan in (BASE, mutate(("parallel", "tp"), 3), mutate(("hardware", "num_gpus"), 2)):
        assert anyio.run(_call_checked, name, plan, detail) or plan is not BASE


# ------------------------------------------------------------------------------------------- stdio session
class StdioSession:
    """One server subprocess; send a line, collect answers until the expected ids arrived."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "server"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ids = itertools.count(1)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "fuzz", "version": "0"}}}
        self.send(json.dumps(init).encode())
        assert self.read()["id"] == 0
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        self.send(b'{"jsonrpc":"2.0","id":"list","method":"tools/list"}')
        self.output_schemas = {t["name"]: t["outputSchema"] for t in self.read()["result"]["tools"]}

    def send(self, line: bytes) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout
        watchdog = threading.Timer(60, self.proc.kill)
        watchdog.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            watchdog.cancel()
        assert line, "the server stopped answering: " + self.close()[-2000:]
        return json.loads(line)

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.stderr.read().decode()  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def session():
    s = StdioSession()
    yield s
    err = s.close()
    assert "Traceback" not in err, err[-3000:]


METHODS = ["tools/call", "tools/call", "tools/list", "resources/read", "prompts/get", "resources/list", "no/such", ""]
TOOLS = ["build_dag", "validate_dag", "lookup_rule", "estimate_performance", "search_strategies", "nope"]
LOOKUP_ARGS = ["rule_id", "query", "strategy", "phase", "node_type", "layer", "limit", "detail"]
id_kinds = st.sampled_from(["int", "str", "null", "float", "object", "bool", "list"])


@st.composite
def requests(draw: Any) -> tuple[bytes, bool]:
    """A request line and whether its id is answerable (else the answer's id is null)."""
    kind = draw(id_kinds)
    n = 10_000 + draw(st.integers(0, 10**6))
    msg_id: Any = {"int": n, "str": f"fz-{n}", "null": None, "float": n + 0.5, "object": {"n": n},
                   "bool": True, "list": [n]}[kind]
    method = draw(st.sampled_from(METHODS) | st.text(max_size=5))
    if method == "tools/call":
        name = draw(st.sampled_from(TOOLS))
        if name == "lookup_rule":
            arguments = draw(st.dictionaries(st.sampled_from(LOOKUP_ARGS), hostile | st.text(max_size=20), max_size=3))
        elif name == "search_strategies":
            arguments = {"model": draw(st.sampled_from(["llama-3.1-8b", "mixtral-8x7b"]) | hostile),
                         "hardware": {"gpu": "h100-sxm", "num_gpus": draw(st.integers(1, 4) | hostile)}}
        else:
            arguments = {"plan": mutate(draw(paths), draw(hostile))}
        params: Any = {"name": name, "arguments": arguments}
    else:
        params = draw(hostile | st.just({"uri": "pdag://models"}))
    msg = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0", 2])), "id": msg_id, "method": method,
           "params": params}
    if draw(st.booleans()):
        del msg["params"]
    try:
        line = json.dumps(msg, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        line = b'{"jsonrpc":"2.0","id":' + str(n).encode() + b',"method":"tools/list","params":[]}'
        kind = "int"
    return line, kind in ("int", "str")


def _wanted(line: bytes, answerable: bool) -> Any:
    """The id the answer must carry: the request's, unless the line is not JSON at all (raw bytes, or a raw
    lone surrogate, which is not UTF-8), where JSON-RPC says parse error with id null."""
    try:
        return json.loads(line.decode("utf-8"))["id"] if answerable else None
    except UnicodeDecodeError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(req=requests() | st.binary(min_size=1, max_size=40).filter(lambda b: b.strip() and b"\n" not in b
                                                                  and b"\r" not in b).map(lambda b: (b, False)))
def test_stdio_session_answers_every_request(session, req):
    line, answerable = req
    session.send(line)
    wanted = _wanted(line, answerable) if line.startswith(b"{") else None
    answer = session.read()
    assert answer.get("jsonrpc") == "2.0"
    assert answer["id"] == wanted, (line[:200], answer)
    if "error" in answer:
        assert isinstance(answer["error"]["code"], int) and answer["error"]["message"]
        assert answer["error"]["code"] != 0, answer
    elif "result" in answer and "structuredContent" in answer["result"] and not answer["result"].get("isError"):
        name = json.loads(line)["params"]["name"]
        jsonschema.validate(answer["result"]["structuredContent"], session.output_schemas[name])
    if "result" in answer and answer["result"].get("isError"):
        text = answer["result"]["content"][0]["text"]
        assert "internal error" not in text and "Traceback" not in text, text


# ------------------------------------------------------------------------------------------- CLI
@FAST
@given(data=st.binary(max_size=200) | hostile.map(lambda v: json.dumps({"model": v}, allow_nan=True).encode(
    "utf-8", "surrogatepass")), command=st.sampled_from(["validate", "fix", "estimate", "build", "export"]))
def test_cli_on_arbitrary_files_exits_cleanly(tmp_path, capsys, data, command):
    path = tmp_path / "in.json"
    path.write_bytes(data)
    argv = [command, str(path)] + (["--engine", "vllm"] if command == "export" else [])
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err
    if code == 2:
        assert err.startswith("error: ")
