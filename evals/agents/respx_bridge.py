"""Let a respx Router answer the Anthropic SDK's requests.

anthropic >= 1.0 sends its requests with ``httpx2``, while respx 0.23 patches only ``httpx``/``httpcore``: a plain
``respx.mock`` never sees them.  This transport converts each ``httpx2`` request to an ``httpx`` one, lets the
router match it (routes, side effects and call recording all work as usual) and converts the answer back.
"""

from __future__ import annotations

import httpx
import httpx2
import respx

API_BASE = "https://api.anthropic.com"

__all__ = ["API_BASE", "respx_transport"]


def respx_transport(router: respx.Router) -> httpx2.MockTransport:
    """An ``httpx2`` transport served by ``router`` (usable by sync and async clients)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        legacy = httpx.Request(
            request.method, str(request.url), headers=request.headers.multi_items(), content=request.content
        )
        response = router.handler(legacy)
        return httpx2.Response(response.status_code, headers=response.headers.multi_items(), content=response.read())

    return httpx2.MockTransport(handler)
