"""The dashboard's web app: Starlette routes over the admin protocol.

Every page needs a session (cookie: HttpOnly, SameSite=Strict); with ``acl`` on, a login too.
Every POST is a form with the session's CSRF token, from this origin, within
``max_request_bytes``; under ``acl`` only an admin account may act (the cluster checks again).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..client.admin import Admin
from ..client.errors import MQClientError
from ..cluster.logging import get_logger
from . import pages
from .forms import FormError, parse_form
from .sessions import Session
from .state import Dashboard, Forbidden, session_of, with_cookie
from .static import CSS, JS

log = get_logger(component="dashboard")

SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Origin "null"
    (b"cache-control", b"no-store"),
]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (FormError -> 413) past ``limit`` bytes before more is read."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise PayloadTooLarge()
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise PayloadTooLarge()
    return bytes(chunks)


class PayloadTooLarge(Exception):
    pass


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


Handler = Callable[[Dashboard, Request, Session], Awaitable[Response]]


def page(dash: Dashboard, fn: Handler, *, public: bool = False, post: bool = False
         ) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler with the session, login, CSRF and error handling every route shares."""

    async def endpoint(request: Request) -> Response:
        session, fresh = session_of(dash, request)
        try:
            if post:
                if not _same_origin(request):
                    raise Forbidden("cross-origin form")
                form = parse_form(await read_body(request, dash.settings.max_request_bytes))
                if not session.check_csrf(form.get("csrf")):
                    raise Forbidden("the form's CSRF token does not match this session: "
                                    "reload the page")
                request.state.form = form
            if dash.settings.acl and session.account is None and not public:
                resp: Response = (PlainTextResponse("log in first", 401) if post
                                  else RedirectResponse("/login", 303))
            else:
                with trio.fail_after(dash.settings.call_timeout_s * 4):
                    resp = await fn(dash, request, session)
        except PayloadTooLarge:
            resp = PlainTextResponse("request too large", 413)
        except Forbidden as exc:
            resp = pages.error_page(dash, request, session, str(exc), 403)
        except (FormError, LookupError, ValueError) as exc:
            resp = pages.error_page(dash, request, session, str(exc), 400)
        except trio.TooSlowError:
            resp = pages.error_page(dash, request, session, "the cluster took too long", 504)
        except (MQClientError, OSError) as exc:
            resp = pages.error_page(dash, request, session, f"{type(exc).__name__}: {exc}",
                                    502)
        return with_cookie(resp, session) if fresh else resp

    return endpoint


def live(dash: Dashboard, fn: Callable[[Admin, Request], Awaitable[dict[str, Any]]]
         ) -> Callable[[Request], Awaitable[Response]]:
    """A server-sent events stream: ``fn``'s figures every ``live_interval_s``."""

    async def endpoint(request: Request) -> Response:
        session, _ = session_of(dash, request)
        if dash.settings.acl and session.account is None:
            return PlainTextResponse("log in first", 401)
        if dash.live_streams >= dash.settings.max_live_streams:
            return PlainTextResponse("too many live streams", 503)
        try:
            admin = await dash.admin(int(request.path_params["cid"]), session)
        except LookupError as exc:
            return PlainTextResponse(str(exc), 404)
        except (MQClientError, OSError) as exc:
            return PlainTextResponse(f"{type(exc).__name__}: {exc}", 502)
        dash.live_streams += 1

        async def events() -> AsyncIterator[bytes]:
            try:
                while True:
                    try:
                        with trio.fail_after(dash.settings.call_timeout_s * 2):
                            data = await fn(admin, request)
                    except (MQClientError, OSError, trio.TooSlowError) as exc:
                        data = {"error": str(exc)}
                    yield b"data: " + orjson.dumps(data) + b"\n\n"
                    await trio.sleep(dash.settings.live_interval_s)
            finally:
                dash.live_streams -= 1

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})

    return endpoint


class SecurityHeaders:
    """Adds the security headers to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def build_app(dash: Dashboard) -> ASGIApp:
    def p(fn: Handler, **kw: Any) -> Callable[[Request], Awaitable[Response]]:
        return page(dash, fn, **kw)

    def static(body: str, media: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return Response(body, media_type=media, headers={"cache-control": "max-age=300"})
        return serve

    routes = [
        Route("/", p(pages.home, public=True)),
        Route("/pick", p(pages.pick, public=True)),
        Route("/login", p(pages.login_form, public=True)),
        Route("/login", p(pages.login, public=True, post=True), methods=["POST"]),
        Route("/logout", p(pages.logout, public=True, post=True), methods=["POST"]),
        Route("/static/app.css", static(CSS, "text/css")),
        Route("/static/app.js", static(JS, "text/javascript")),
        Route("/favicon.ico", static("", "image/x-icon")),
        Route("/c/{cid:int}/cluster", p(pages.cluster)),
        Route("/c/{cid:int}/topics", p(pages.topics)),
        Route("/c/{cid:int}/topics/update", p(pages.topic_update, post=True), methods=["POST"]),
        Route("/c/{cid:int}/topic/{topic}", p(pages.topic)),
        Route("/c/{cid:int}/topic/{topic}/delete", p(pages.topic_delete, post=True),
              methods=["POST"]),
        Route("/c/{cid:int}/groups", p(pages.groups)),
        Route("/c/{cid:int}/group/{group}", p(pages.group)),
        Route("/c/{cid:int}/group/{group}/reset", p(pages.group_reset, post=True),
              methods=["POST"]),
        Route("/c/{cid:int}/messages", p(pages.messages)),
        Route("/c/{cid:int}/message/{msg_id}", p(pages.message)),
        Route("/c/{cid:int}/message/{msg_id}/resend", p(pages.resend, post=True),
              methods=["POST"]),
        Route("/c/{cid:int}/replication", p(pages.replication)),
        Route("/c/{cid:int}/chaos", p(pages.chaos)),
        Route("/c/{cid:int}/acl", p(pages.acl)),
        Route("/chaos/{run_id}", p(pages.chaos_run)),
        Route("/chaos/{run_id}/timeline.svg", p(pages.chaos_svg)),
        Route("/c/{cid:int}/live/cluster", live(dash, pages.live_cluster)),
        Route("/c/{cid:int}/live/replication", live(dash, pages.live_replication)),
        Route("/c/{cid:int}/live/group/{group}", live(dash, pages.live_group)),
    ]
    return SecurityHeaders(Starlette(routes=routes))
