"""Who owns HTTP: one package makes every request (``gymlab/_http``), no client, transport or registry
is process-wide, and two Labs in one process never reach into each other's servers or share a client."""

from __future__ import annotations

import ast
import asyncio
import functools
from pathlib import Path

from fastapi import Request

from gymlab import Lab
from gymlab._runtime.serve import ThreadedServer
from gymlab._sync import run_sync
from gymlab.server import BaseServer

PACKAGE = Path(__file__).resolve().parents[2] / "gymlab"
#: What makes a connection pool, a registry of servers or a client: never built once for the process.
SHARED = {"Client", "AsyncClient", "ClientSession", "TCPConnector", "AiohttpTransport", "Registry"}
#: Modules that import an HTTP client library besides ``gymlab/_http``: each a third-party library
#: making its own requests (docs/transport.md).
FOREIGN_CLIENTS = {
    "gymlab/testing/session_conformance.py": "httpx.ASGITransport: the contract's checks call the app in-process",
}
HTTP_LIBRARIES = ("aiohttp", "httpx", "urllib.request", "http.client", "requests", "urllib3")


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(PACKAGE.parent)), ast.parse(p.read_text(), str(p))) for p in PACKAGE.rglob("*.py")]


def _called(node: ast.AST) -> set[str]:
    """The names of what ``node`` calls (``aiohttp.ClientSession(...)`` -> ``ClientSession``)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def _shared_state(tree: ast.Module) -> list[str]:
    """Module- and class-level assignments that build a client, transport or registry (or a ContextVar
    holding a client), and cached functions that build one."""
    found = []
    scopes = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in scopes:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                built = _called(node.value) & SHARED
                if "ContextVar" in _called(node.value) and "client" in ast.unparse(node).lower():
                    built.add("ContextVar of a client")
                if built:
                    found.append(f"line {node.lineno}: {', '.join(sorted(built))} at import")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # a cached_property holds one per instance (a server's own client), not one for the process
            cached = any("cache" in (d := ast.unparse(n)) and "cached_property" not in d for n in node.decorator_list)
            if cached and (built := _called(node) & SHARED):
                found.append(f"line {node.lineno}: {node.name} caches {', '.join(sorted(built))}")
    return found


def test_no_client_transport_or_registry_is_process_wide():
    found = {path: hits for path, tree in _modules() if (hits := _shared_state(tree))}
    assert found == {}
    for gone in ("http1.py", "client.py", "inproc.py", "cookies.py", "retry.py"):
        assert not (PACKAGE / gone).exists(), gone


def test_the_scan_finds_each_kind_of_shared_client():
    """The scan itself, on the shapes it must refuse (a scan that finds nothing proves nothing)."""
    hostile = """
import contextvars, functools, aiohttp
DEFAULT = aiohttp.ClientSession()
_current: contextvars.ContextVar[Client] = contextvars.ContextVar("current")
_request_id = contextvars.ContextVar("request_id")
class Holder:
    shared = Registry()
@functools.cache
def default_client():
    return Client(Registry())
def fine():
    return Client()
"""
    found = _shared_state(ast.parse(hostile))
    assert [f.split(":")[0] for f in found] == ["line 3", "line 4", "line 7", "line 9"]


def test_only_the_http_package_makes_requests():
    found = {}
    for path, tree in _modules():
        if path.startswith("gymlab/_http/") or path in FOREIGN_CLIENTS:
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            hits = [n for n in names if n.split(".")[0] in HTTP_LIBRARIES or n in HTTP_LIBRARIES]
            if hits:
                found.setdefault(path, []).extend(f"line {node.lineno}: {h}" for h in hits)
    assert found == {}
    for path in FOREIGN_CLIENTS:
        assert (PACKAGE.parent / path).exists(), path  # an exception that outlived its module goes too


class Who(BaseServer):
    """Says which Lab's server answered and whether the request came in-process (no client port)."""

    tag: str = ""

    def setup_webserver(self):
        app = super().setup_webserver()

        @app.post("/who")
        async def who(request: Request) -> dict:
            return {"tag": self.tag, "in_process": request.client.port == 0}

        @app.post("/relay")
        async def relay(body: dict) -> dict:  # a hop this server makes, through the client it was handed
            return await self.client.post_ok(body["url"], "/who", {})

        return app


def test_two_labs_never_see_each_others_servers_or_clients():
    a, b = Lab(), Lab()
    try:
        mine, theirs = a.serve(Who, name="who", tag="a"), b.serve(Who, name="who", tag="b")
        assert a.client is not b.client and a.client.registry is not b.client.registry
        assert mine.server.client is a.client and theirs.server.client is b.client

        def ask(lab, url):
            return run_sync(lab.client.post_ok(url, "/who", {}))

        assert ask(a, mine.url) == {"tag": "a", "in_process": True}
        assert ask(b, theirs.url) == {"tag": "b", "in_process": True}
        assert ask(a, theirs.url) == {"tag": "b", "in_process": False}  # over the socket, not through A's registry
        assert ask(b, mine.url) == {"tag": "a", "in_process": False}
        assert mine.post("/relay", {"url": mine.url}) == {"tag": "a", "in_process": True}
        assert mine.post("/relay", {"url": theirs.url}) == {"tag": "b", "in_process": False}

        async def crossed():  # both Labs' hops at once, interleaved on the one loop
            calls = [
                lab.client.post_ok(url, "/who", {}) for _ in range(20) for lab, url in ((a, mine.url), (b, mine.url))
            ]
            return await asyncio.gather(*calls)

        answers = run_sync(crossed())
        assert answers == [{"tag": "a", "in_process": True}, {"tag": "a", "in_process": False}] * 20

        a.close()
        assert a.client.registry.lookup(mine.url) is None
        assert ask(b, theirs.url) == {"tag": "b", "in_process": True}  # the other Lab works on
        assert theirs.post("/relay", {"url": theirs.url}) == {"tag": "b", "in_process": True}
    finally:
        a.close()
        b.close()


def test_a_standalone_server_makes_its_client_at_startup_and_closes_it_at_shutdown():
    with Lab() as lab:
        target = lab.serve(Who, name="who", tag="lab")
        alone = Who(name="alone", tag="alone")
        server = ThreadedServer(alone.app, name="alone").start()
        try:
            made = vars(alone).get("client")  # the cached property's value: made at startup, not on a first hop
            assert made is not None and made is not lab.client and alone._owns_client
            relayed = run_sync(lab.client.post_ok(server.url, "/relay", {"url": target.url}))
            assert relayed == {"tag": "lab", "in_process": False}  # its own client: no Lab's registry
        finally:
            server.stop()
        assert "client" not in vars(alone)  # closed at shutdown
