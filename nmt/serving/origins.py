"""Which web pages may make the server work: its own page, and the origins a user allows.

A browser sends a page's cross-origin `fetch` with an `Origin` header. For a JSON body it first
asks (a CORS preflight), and only the origins in `cors_origins` are told yes; but a "simple"
request — a form or `text/plain` body — is sent without asking, so any page a user visits could
make a local nmt-serve translate (or spend an API key's quota) unless the server itself refuses
it. So a request whose Origin is neither the server's own (the Host it was sent to) nor an
allowed one is refused with 403 before its body is read; a request without an Origin (curl, the
clients of the APIs, the server's own page in a GET) is not a browser's cross-origin request and
goes on.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

SAFE = ("GET", "HEAD", "OPTIONS")  # read nothing, change nothing: never refused here


def middleware(allowed: list[str]) -> list[Middleware]:
    """The guard (outermost: a refused request reaches nothing) and the CORS answers for the
    allowed origins (`*`: any)."""
    cors = Middleware(
        CORSMiddleware, allow_origins=list(allowed), allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["Authorization", "Content-Type"], max_age=600,
    )  # fmt: skip
    return [Middleware(OriginGuard, allowed=list(allowed)), cors]


class OriginGuard:
    """The ASGI guard of the module's notes."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {origin.rstrip("/") for origin in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            origin = headers.get("origin")
            if origin is not None and not self._allows(origin, headers.get("host", "")):
                message = (
                    f"a request from the page of {origin[:100]} is refused: this server answers "
                    "its own page and the origins of its cors_origins setting"
                )
                await JSONResponse({"error": message}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allows(self, origin: str, host: str) -> bool:
        if "*" in self.allowed or origin.rstrip("/") in self.allowed:
            return True
        # the server's own page: an origin of the host the request was sent to (behind a proxy
        # that ends TLS the scheme differs, so the host alone is compared)
        return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()
