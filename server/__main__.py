"""`python -m server` / `pdag-server`: stdio by default (Claude Desktop), `--http` for streamable HTTP on loopback."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import logging
import math
import os
import sys

import anyio

from server.http import AUTH_ENV, MAX_BODY_BYTES, SESSION_IDLE_S

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdag-server", description="pdag MCP server (stdio unless --http).")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="bind address for --http (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port for --http (default 8000)")
    p.add_argument("--path", default="/mcp", help="endpoint path for --http (default /mcp)")
    p.add_argument("--allow-remote", action="store_true", help="permit a non-loopback --host (needs --allowed-host)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="Host header accepted with --allow-remote (repeatable; e.g. pdag.example:8000)")
    p.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="Origin header accepted with --allow-remote (repeatable; default http(s)://<allowed host>)")
    p.add_argument("--auth-token", default=os.environ.get(AUTH_ENV) or None, metavar="TOKEN",
                   help=f"for --http: require 'Authorization: Bearer TOKEN' on every request (default: ${AUTH_ENV})")
    p.add_argument("--session-idle-timeout", type=float, default=SESSION_IDLE_S, metavar="SECONDS",
                   help=f"for --http: close a session after this long without a request (default {SESSION_IDLE_S:g})")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, metavar="BYTES",
                   help=f"for --http: largest request body (default {MAX_BODY_BYTES:,}: the largest DAG pdag builds)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return p


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pdag")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def _check(args: argparse.Namespace) -> str | None:
    """The first argument error, as one line; None when all are usable."""
    if not 0 < args.port < 65536:
        return f"--port {args.port} is out of range 1-65535"
    if not (math.isfinite(args.session_idle_timeout) and args.session_idle_timeout > 0):
        return f"--session-idle-timeout {args.session_idle_timeout} must be a positive number of seconds"
    if args.max_body_bytes < 1024:
        return f"--max-body-bytes {args.max_body_bytes} is too small (at least 1024)"
    if args.auth_token is not None and (len(args.auth_token) < 16 or not args.auth_token.isprintable()):
        return "--auth-token must be at least 16 printable characters"
    return None


def main(argv: list[str] | None = None) -> int:
    """Check the arguments before opening any transport, so a mistake is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    security = None
    if args.http and not is_loopback(args.host):
        if not args.allow_remote or not args.allowed_host:
            print(f"error: refusing to bind {args.host!r}: not a loopback address. Pass --allow-remote together with"
                  " --allowed-host HOST[:PORT] (DNS-rebinding protection stays on).", file=sys.stderr)
            return 2
        from mcp.server.transport_security import TransportSecuritySettings

        origins = args.allowed_origin or [f"{s}://{h}" for h in args.allowed_host for s in ("http", "https")]
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=args.allowed_host,
                                             allowed_origins=origins)
        if not args.auth_token:
            print(f"WARNING: pdag-server is binding {args.host!r}, reachable beyond this machine, WITHOUT "
                  f"authentication: anyone who can reach the port can call every tool. Set --auth-token (or "
                  f"${AUTH_ENV}) or put an authenticating proxy in front.", file=sys.stderr, flush=True)

    from server.app import create_server

    server = create_server()
    logging.getLogger().setLevel(args.log_level)  # MCPServer configures logging too; keep the user's level
    try:
        if args.http:
            from server.http import serve_http

            anyio.run(functools.partial(serve_http, server, host=args.host, port=args.port, path=args.path,
                                        security=security, max_body_bytes=args.max_body_bytes,
                                        idle_timeout_s=args.session_idle_timeout, token=args.auth_token))
        else:
            from server.stdio import serve_stdio

            anyio.run(serve_stdio, server)
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the address cannot be listened on (taken port, address not on this machine)
        print(f"error: cannot listen on {args.host}:{args.port} ({exc.strerror or exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
