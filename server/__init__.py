"""MCP glue for pdag: registers the core's tools, the knowledge resources and the prompts."""

from server.app import create_server

__all__ = ["create_server"]
