"""Streamable HTTP for pdag: the SDK's app behind a body limit and an optional bearer token, both answering
in JSON-RPC, with idle sessions expiring and one start-up line that gives the URL.

The body limit fits the largest DAG the server itself builds (tools.core.dag.MAX_NODES nodes as node-link JSON,
about 400 bytes per node with its edges), so a full DAG from build_dag can always be sent back to
validate_dag. The SDK's own limit answers in plain text; this one answers a JSON-RPC error a client can parse.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_REQUEST

from tools.core.dag import MAX_NODES

logger = logging.getLogger("pdag.server")

BYTES_PER_NODE = 512  # node-link JSON of a node and its edges, with room (measured ~380 on DeepSeek-V3)
MAX_BODY_BYTES = MAX_NODES * BYTES_PER_NODE  # 15,360,000 bytes (docs/limits.md states it; a test compares)
SESSION_IDLE_S = 600.0  # a 2025-era session with no request for this long is closed and its memory freed
AUTH_ENV = "PDAG_AUTH_TOKEN"
UNAUTHORIZED = -32001  # implementation-defined server error range of JSON-RPC

Scope = dict[str, Any]


def _jsonrpc_error(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()


async def _send_json(send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: bearer-token check (when a token is set), then the body limit."""

    def __init__(self, app: Any, max_body_bytes: int, token: str | None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.token = token

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.token is not None:
            given = headers.get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                await _send_json(send, 401, _jsonrpc_error(UNAUTHORIZED, "Unauthorized: send the header "
                                                           "'Authorization: Bearer <token>' set on the server"),
                                 [(b"www-authenticate", b"Bearer")])
                return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send, int(declared))
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                await self._too_large(send, size)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def receive_again() -> Any:
            return replay.pop() if replay else await receive()

        await self.app(scope, receive_again, send)

    async def _too_large(self, send: Any, size: int) -> None:
        await _send_json(send, 413, _jsonrpc_error(
            INVALID_REQUEST, f"Request body too large: {size:,} bytes, limit {self.max_body_bytes:,} "
                             "(pdag-server --max-body-bytes)"))


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a taken port or a foreign address is one OSError, not uvicorn's
    exit from inside the event loop."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=2048)


async def serve_http(server: MCPServer, *, host: str, port: int, path: str, security: TransportSecuritySettings | None,
                     max_body_bytes: int = MAX_BODY_BYTES, idle_timeout_s: float = SESSION_IDLE_S,
                     token: str | None = None) -> None:
    """Serve until cancelled; print the URL on stderr once the socket is listening."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=path, max_request_body_size=max_body_bytes + 1,
                                     session_idle_timeout=idle_timeout_s, transport_security=security, host=host)
    config = uvicorn.Config(Guard(app, max_body_bytes, token), host=host, port=port, log_level="warning",
                            lifespan="on")
    web = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    sock = listen(host, port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(web.serve, sockets=[sock]))
        while not web.started:
            if web.should_exit:
                return
            await anyio.sleep(0.05)
        print(f"pdag MCP server listening on http://{shown}:{port}{path} (streamable HTTP; "
              f"auth: {'bearer token' if token else 'none'}; sessions expire after {idle_timeout_s:g} s idle; "
              f"body limit {max_body_bytes:,} bytes)", file=sys.stderr, flush=True)
