"""`python -m server` / `pdag-server`: stdio by default (Claude Desktop), `--http` for streamable HTTP on loopback."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

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
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    """Check the arguments before opening any transport, so a mistake is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    if not 0 < args.port < 65536:
        print(f"error: --port {args.port} is out of range 1-65535", file=sys.stderr)
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

    from server.app import create_server

    server = create_server()
    logging.getLogger().setLevel(args.log_level)  # MCPServer configures logging too; keep the user's level
    try:
        if args.http:
            server.run("streamable-http", host=args.host, port=args.port, streamable_http_path=args.path,
                       transport_security=security)
        else:
            import anyio

            from server.stdio import serve_stdio

            anyio.run(serve_stdio, server)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
