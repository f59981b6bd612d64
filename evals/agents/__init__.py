"""The agents the suite can run: each hands the loop an ``AsyncAnthropic`` client for one case.

- ``scripted`` (offline default): ``ScriptedModel`` answers through respx and the httpx2 bridge, so the real
  SDK, the real loop and the real MCP server run; only the model is simulated.
- ``anthropic``: the live Messages API (``ANTHROPIC_API_KEY``, ``--model``).
- ``replay``: serves the responses of recorded transcripts (``--record DIR`` on a live run) through respx.
- ``sessions``: serves the steps of sessions an agent recorded with ``python -m evals.record``: each recorded tool
  call is made again against the current code, then the recorded final answer is given.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anthropic
import httpx
import httpx2
import respx

from evals.agent import Transcript
from evals.agents.respx_bridge import API_BASE, respx_transport
from evals.agents.scripted import ScriptedModel, message_json
from evals.cases import Case

__all__ = ["Agent", "LiveAgent", "ReplayAgent", "ScriptedAgent", "SessionAgent", "make_agent", "mocked_client"]


class Agent(Protocol):
    name: str

    def injects_mistakes(self, case: Case) -> bool:
        """Whether the first draft carries the case's listed mistakes (then scored as caught or not)."""
        ...

    def model_for(self, case: Case) -> str: ...

    def client(self, case: Case) -> AbstractAsyncContextManager[anthropic.AsyncAnthropic]: ...


@asynccontextmanager
async def mocked_client(router: respx.Router) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An ``AsyncAnthropic`` whose HTTP requests are answered by ``router`` (no network, no SDK retries)."""
    http = httpx2.AsyncClient(transport=respx_transport(router))
    async with anthropic.AsyncAnthropic(
        api_key="offline-no-key", base_url=API_BASE, max_retries=0, http_client=http
    ) as llm:
        yield llm


class ScriptedAgent:
    name = "scripted"

    def __init__(self, model: str = "pdag-scripted") -> None:
        self.model = model

    def model_for(self, case: Case) -> str:
        return self.model

    def injects_mistakes(self, case: Case) -> bool:
        return True

    @asynccontextmanager
    async def client(self, case: Case) -> AsyncIterator[anthropic.AsyncAnthropic]:
        router = respx.Router(base_url=API_BASE, assert_all_mocked=True)
        router.post("/v1/messages").mock(side_effect=ScriptedModel(case, self.model))
        async with mocked_client(router) as llm:
            yield llm


class LiveAgent:
    name = "anthropic"

    def __init__(self, model: str, api_key: str | None = None) -> None:
        self.model = model
        self.api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not self.api_key:
            raise SystemExit("the anthropic agent needs ANTHROPIC_API_KEY in the environment (and --model)")

    def model_for(self, case: Case) -> str:
        return self.model

    def injects_mistakes(self, case: Case) -> bool:
        return False

    @asynccontextmanager
    async def client(self, case: Case) -> AsyncIterator[anthropic.AsyncAnthropic]:
        async with anthropic.AsyncAnthropic(api_key=self.api_key, max_retries=0) as llm:
            yield llm


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


_ERROR_TYPES = {429: "rate_limit_error", 529: "overloaded_error"}


class ReplayAgent:
    """Replays ``<dir>/<case id>.jsonl``: recorded responses and API errors, in order; tools run for real."""

    name = "replay"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise SystemExit(f"replay: no transcript directory {self.directory}")

    def records(self, case: Case) -> list[dict[str, Any]]:
        path = self.directory / f"{case.id}.jsonl"
        return Transcript.read(path) if path.exists() else []

    def meta(self, case: Case) -> dict[str, Any]:
        return next((r for r in self.records(case) if r["type"] == "meta"), {})

    def model_for(self, case: Case) -> str:
        return str(self.meta(case).get("model") or "replay")

    def injects_mistakes(self, case: Case) -> bool:
        return self.meta(case).get("agent") == "scripted"

    @asynccontextmanager
    async def client(self, case: Case) -> AsyncIterator[anthropic.AsyncAnthropic]:
        queue: list[httpx.Response] = []
        for rec in self.records(case):
            if rec["type"] == "response":
                queue.append(httpx.Response(200, json=rec["body"]))
            elif rec["type"] == "api_error":
                status = int(rec.get("status") or 503)
                kind = _ERROR_TYPES.get(status, "api_error")
                queue.append(httpx.Response(status, json=_error_body(str(rec.get("error", "")), kind)))

        def serve(request: httpx.Request) -> httpx.Response:
            if not queue:
                body = _error_body(f"replay: transcript of {case.id} has no more responses", "invalid_request_error")
                return httpx.Response(400, json=body)
            return queue.pop(0)

        router = respx.Router(base_url=API_BASE, assert_all_mocked=True)
        router.post("/v1/messages").mock(side_effect=serve)
        async with mocked_client(router) as llm:
            yield llm


class SessionAgent:
    """Replays sessions recorded by ``python -m evals.record`` (``<dir>/**/*.jsonl``): one Messages API response
    per recorded tool call, asking for the same call again (the tools run on today's code), then the recorded
    final answer. The agent's choices are fixed; what pdag answers them, and so the score, follows the code.
    Token counts are stand-ins (about four characters a token) of what the conversation would have cost."""

    name = "sessions"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise SystemExit(f"sessions: no directory {self.directory}")
        self.files = {self.session_id(f): f for f in sorted(self.directory.rglob("*.jsonl"))}

    def session_id(self, path: Path) -> str:
        meta = Transcript.read(path)[0] if path.stat().st_size else {}
        label = path.relative_to(self.directory).with_suffix("").as_posix()
        return f"{meta.get('case', '?')}@{label}"

    def cases(self, tasks: dict[str, Case]) -> list[Case]:
        """One case per session: its task's request and expectations, under the session's id."""
        out = []
        for sid in self.files:
            task = tasks.get(sid.split("@", 1)[0])
            if task is None:
                raise SystemExit(f"sessions: {self.files[sid]} names no known task")
            out.append(task.model_copy(update={"id": sid}))
        return out

    def model_for(self, case: Case) -> str:
        return str(Transcript.read(self.files[case.id])[0].get("model") or "session")

    def injects_mistakes(self, case: Case) -> bool:
        return False

    @asynccontextmanager
    async def client(self, case: Case) -> AsyncIterator[anthropic.AsyncAnthropic]:
        records = Transcript.read(self.files[case.id])
        steps: list[tuple[list[dict[str, Any]], str]] = [
            ([{"type": "tool_use", "id": f"toolu_{k:03d}", "name": r["name"], "input": r["input"]}], "tool_use")
            for k, r in enumerate(x for x in records if x["type"] == "tool_call")]
        final = next((r["text"] for r in reversed(records) if r["type"] == "final_answer"), "")
        steps.append(([{"type": "text", "text": final}], "end_turn"))
        model = self.model_for(case)

        def serve(request: httpx.Request) -> httpx.Response:
            if not steps:
                return httpx.Response(400, json=_error_body("session: no more steps", "invalid_request_error"))
            content, stop = steps.pop(0)
            usage = (max(1, len(request.content) // 4), max(1, len(str(content)) // 4))
            return httpx.Response(200, json=message_json(f"msg_{len(steps)}", model, content, stop, usage))

        router = respx.Router(base_url=API_BASE, assert_all_mocked=True)
        router.post("/v1/messages").mock(side_effect=serve)
        async with mocked_client(router) as llm:
            yield llm


def make_agent(kind: str, *, model: str | None = None, replay_dir: Path | None = None,
               sessions_dir: Path | None = None) -> Agent:
    """The agent named on the command line."""
    if kind == "scripted":
        return ScriptedAgent(model or "pdag-scripted")
    if kind == "anthropic":
        if not model:
            raise SystemExit("the anthropic agent needs --model (e.g. --model claude-sonnet-4-6)")
        return LiveAgent(model)
    if kind == "replay":
        if replay_dir is None:
            raise SystemExit("the replay agent needs --replay DIR (a folder of <case id>.jsonl transcripts)")
        return ReplayAgent(replay_dir)
    if kind == "sessions":
        if sessions_dir is None:
            raise SystemExit("the sessions agent needs --sessions DIR (sessions recorded by python -m evals.record)")
        return SessionAgent(sessions_dir)
    raise SystemExit(f"unknown agent {kind!r}; use scripted, anthropic, replay or sessions")
