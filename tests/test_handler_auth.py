"""Every HTTP and websocket route this package registers refuses unauthenticated requests.

The routes are not listed by hand: they are read from the running server's
tornado router (every rule whose handler class comes from ``jupyter_data_agent``),
so a handler added later is probed too. Each method a handler implements is
sent without a token (with a matching XSRF cookie and header, so that a refusal
comes from authentication, not from the XSRF check) and must answer 401/403;
websocket routes get an upgrade request. The server allows unauthenticated
access globally (``ServerApp.allow_unauthenticated_access``, jupyter_server's
default), so every handler has to guard itself. A self-test registers handlers
without authentication and checks the same probe flags them.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

import pytest
import tornado.web
import tornado.websocket
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.routing import PathMatches
from tornado.util import re_unescape

PACKAGE = "jupyter_data_agent"
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH")  # OPTIONS: CORS preflight, open by design
WITH_BODY = {"POST", "PUT", "PATCH"}
XSRF = uuid.uuid4().hex
# Plausible values for path parameters, by group name; any other group gets "x".
PATH_VALUES = {"job_id": uuid.uuid4().hex, "kernel_id": str(uuid.uuid4()), "name": "x"}


@pytest.fixture
def jp_server_config(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND",
                 "JUPYTER_DATA_AGENT_MODEL", "JUPYTER_SERVER_ALLOW_UNAUTHENTICATED_ACCESS"):
        monkeypatch.delenv(name, raising=False)
    return {
        "ServerApp": {
            "jpserver_extensions": {PACKAGE: True},
            # handlers must refuse by themselves, not rely on the global switch
            "allow_unauthenticated_access": True,
        },
        "DataAgent": {
            "backend": "openai",
            "base_url": "http://127.0.0.1:9/v1",  # never contacted: no request gets that far
            "api_key": "sk-unused-auth-test-key",
            "model": "test-model",
            "max_retries": 0,
        },
    }


# -- enumeration -----------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    pattern: str
    handler: type[tornado.web.RequestHandler]
    path: str

    @property
    def websocket(self) -> bool:
        return issubclass(self.handler, tornado.websocket.WebSocketHandler)

    @property
    def methods(self) -> list[str]:
        """HTTP methods the handler implements (tornado's placeholder raises 405)."""
        if self.websocket:
            return ["WEBSOCKET"] + [m for m in METHODS if m not in ("GET", "HEAD") and _implements(
                self.handler, m)]
        return [m for m in METHODS if _implements(self.handler, m)]


def _implements(handler: type[tornado.web.RequestHandler], method: str) -> bool:
    return getattr(handler, method.lower()) is not getattr(tornado.web.RequestHandler, method.lower())


def route_rules(router):
    """(matcher, target) of every rule, nested routers (host rules, extensions) included."""
    for rule in getattr(router, "rules", ()):
        target = rule.target
        if isinstance(target, type) and issubclass(target, tornado.web.RequestHandler):
            yield rule.matcher, target
        elif hasattr(target, "rules"):
            yield from route_rules(target)


def fill_path(pattern: str) -> str:
    """A request path matching a route pattern, path parameters filled with plausible values."""
    body = pattern.removeprefix("^").removesuffix("$")
    body = re.sub(r"\(\?P<(\w+)>[^()]*\)", lambda m: PATH_VALUES.get(m.group(1), "x"), body)
    body = re.sub(r"\((?!\?)[^()]*\)", "x", body)
    path = re_unescape(body)
    assert re.fullmatch(pattern.removesuffix("$"), path), (
        f"cannot fill the parameters of route {pattern!r}: add a value to PATH_VALUES")
    return path


def package_routes(web_app, package: str = PACKAGE) -> list[Route]:
    """Every route of the running app whose handler class is defined in ``package``."""
    seen: dict[tuple[str, type], Route] = {}
    for matcher, handler in route_rules(web_app.default_router):
        if not isinstance(matcher, PathMatches):
            continue
        if handler.__module__ != package and not handler.__module__.startswith(package + "."):
            continue
        key = (matcher.regex.pattern, handler)
        if key not in seen:
            seen[key] = Route(matcher.regex.pattern, handler, fill_path(matcher.regex.pattern))
    return sorted(seen.values(), key=lambda r: r.pattern)


# -- probing ---------------------------------------------------------------------------


async def status_of(port: int, route: Route, method: str, token: str | None = None) -> int:
    """The status the server answers; 101 when a websocket upgrade was accepted."""
    headers = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
    if token:
        headers["Authorization"] = f"token {token}"
    if method == "WEBSOCKET":
        req = HTTPRequest(f"ws://127.0.0.1:{port}{route.path}", headers=headers,
                          connect_timeout=30, request_timeout=30)
        try:
            conn = await tornado.websocket.websocket_connect(req)
        except HTTPClientError as e:
            return e.code
        conn.close()
        return 101
    body = json.dumps({}) if method in WITH_BODY else None
    if body is not None:
        headers["Content-Type"] = "application/json"
    resp = await AsyncHTTPClient().fetch(
        f"http://127.0.0.1:{port}{route.path}", method=method, body=body, headers=headers,
        raise_error=False, follow_redirects=False, allow_nonstandard_methods=True,
        connect_timeout=30, request_timeout=60)
    if resp.code in (301, 302, 303, 307) and "/login" in resp.headers.get("Location", ""):
        return 403  # a page handler sends the anonymous visitor to the login page
    return resp.code


async def open_methods(port: int, routes: list[Route]) -> list[str]:
    """'METHOD pattern (Handler) -> status' for every request that was not refused."""
    accepted = []
    for route in routes:
        for method in route.methods:
            code = await status_of(port, route, method)
            if code not in (401, 403):
                accepted.append(f"{method} {route.pattern} ({route.handler.__name__}) -> {code}")
    return accepted


@pytest.fixture
def server(jp_serverapp, http_server_client, jp_http_port, jp_asyncio_loop):
    """(serverapp, port, run): ``run`` runs a coroutine on the server's loop."""
    return jp_serverapp, jp_http_port, jp_asyncio_loop.run_until_complete


# -- tests -----------------------------------------------------------------------------


def test_every_package_route_refuses_unauthenticated_requests(server):
    app, port, run = server
    routes = package_routes(app.web_app)
    # the enumeration found the extension's routes (a cross-check with the extension's own list)
    ext_handlers = {
        h for ext in app.extension_manager.extensions.values()
        for point in ext.extension_points.values() if point.app is not None
        for _, h, *_ in getattr(point.app, "handlers", ()) if isinstance(h, type)
        and h.__module__.startswith(PACKAGE)
    }
    assert ext_handlers and ext_handlers <= {r.handler for r in routes}
    assert any(r.websocket for r in routes) and any("POST" in r.methods for r in routes)

    assert run(open_methods(port, routes)) == []

    # control: with the token the same safe requests get past authentication (so the 403s
    # above came from the missing token, not from a broken path or the XSRF check)
    token = app.identity_provider.token
    for route in routes:
        for method in route.methods:
            if method in ("GET", "HEAD", "WEBSOCKET"):
                code = run(status_of(port, route, method, token=token))
                assert code not in (401, 403), (method, route.pattern, code)


def _selftest_handlers():
    """Handlers as a careless contributor might add them to the package."""

    class OpenAPI(APIHandler):
        def get(self, job_id):
            self.finish("{}")

        def post(self, job_id):
            self.finish("{}")

    class OpenSocket(tornado.websocket.WebSocketHandler, JupyterHandler):
        def open(self):
            pass

    class GuardedAPI(APIHandler):
        @tornado.web.authenticated
        def delete(self):
            self.finish("{}")

    for cls in (OpenAPI, OpenSocket, GuardedAPI):
        cls.__module__ = f"{PACKAGE}.server._auth_selftest"
    return OpenAPI, OpenSocket, GuardedAPI


def test_the_probe_flags_a_handler_without_authentication(server):
    app, port, run = server
    open_api, open_socket, guarded = _selftest_handlers()
    base = url_path_join(app.base_url, "jupyter-data-agent", "selftest")
    app.web_app.add_handlers(".*$", [
        (url_path_join(base, "open", r"(?P<job_id>[^/]+)"), open_api),
        (url_path_join(base, "socket"), open_socket),
        (url_path_join(base, "guarded"), guarded),
    ])
    routes = [r for r in package_routes(app.web_app) if "selftest" in r.pattern]
    assert {r.handler for r in routes} == {open_api, open_socket, guarded}
    assert next(r for r in routes if r.handler is open_api).path.endswith(
        "/selftest/open/" + PATH_VALUES["job_id"])

    flagged = run(open_methods(port, routes))
    assert sorted(line.split(" (")[0] for line in flagged) == sorted([
        f"GET {url_path_join(base, 'open', '(?P<job_id>[^/]+)')}$",
        f"POST {url_path_join(base, 'open', '(?P<job_id>[^/]+)')}$",
        f"WEBSOCKET {url_path_join(base, 'socket')}$",
    ]), flagged
    # the POST got through without a token: the XSRF pair is not what refuses requests
    assert any(line.startswith("POST") and line.endswith("-> 200") for line in flagged)
