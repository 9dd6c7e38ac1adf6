"""``check_resources_session_contract``: a resources server's app against the episode-session rules."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from gymlab.errors import SessionContractError

Check = Callable[["_Contract", str, str], Awaitable[None]]


@dataclass
class _Contract:
    app: Any
    seed: dict[str, Any]
    keeps_state: bool
    holds_state: Callable[[str], bool] | None
    verify_body: dict[str, Any] | None
    invalid_seed: dict[str, Any] | None
    used: list[str] = field(default_factory=list)

    def new_id(self, rule: str) -> str:
        sid = f"contract-{rule.split()[0]}-{uuid.uuid4().hex[:12]}"
        self.used.append(sid)
        return sid

    def seed_body(self, sid: str, **changes: Any) -> dict[str, Any]:
        body = copy.deepcopy(self.seed)
        body.setdefault("episode_id", {"rollout_id": f"rollout-{sid}", "attempt": 0})
        body.update(changes, resources_session_id=sid)
        return body

    def client(self) -> httpx.AsyncClient:
        """A fresh cookie jar: one episode's view of the server."""
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://resources.test")

    def holds(self, sid: str) -> bool:
        return bool(self.holds_state(sid)) if self.holds_state is not None else False


_fail = SessionContractError


def _said(reply: httpx.Response) -> str:
    return f"HTTP {reply.status_code} {reply.text[:300]}"


async def _post(client: httpx.AsyncClient, rule: str, path: str, body: Any) -> httpx.Response:
    try:
        return await client.post(path, json=body)
    except Exception as exc:  # an app that raises through the transport answered nothing
        raise _fail(rule, f"POST {path} raised {type(exc).__name__}: {exc}") from exc


async def _refused_seed(client: httpx.AsyncClient, rule: str, body: Any, status: int, what: str) -> None:
    reply = await _post(client, rule, "/seed_session", body)
    if reply.status_code != status:
        raise _fail(rule, f"{what} must be refused with {status}, got {_said(reply)}")


def _expect(rule: str, reply: httpx.Response, status: int, what: str, sid: str | None = None) -> Any:
    """The JSON answer of ``reply`` with ``status``; with ``sid``, an object naming that session."""
    if reply.status_code != status:
        raise _fail(rule, f"{what}: expected HTTP {status}, got {_said(reply)}")
    try:
        answer = reply.json()
    except ValueError:
        raise _fail(rule, f"{what}: the answer is not JSON: {reply.text[:200]!r}") from None
    if sid is not None and (not isinstance(answer, dict) or answer.get("resources_session_id") != sid):
        raise _fail(rule, f"{what}: expected an answer naming resources_session_id {sid!r}, got {answer!r:.300}")
    return answer


async def _seed(c: _Contract, client: httpx.AsyncClient, rule: str, sid: str, what: str = "the seed") -> dict:
    answer = _expect(rule, await _post(client, rule, "/seed_session", c.seed_body(sid)), 200, what, sid)
    if "observation" in answer and not (answer["observation"] is None or isinstance(answer["observation"], str)):
        raise _fail(rule, f"{what}: observation must be a string or null, got {answer['observation']!r:.100}")
    return answer


async def _close(c: _Contract, client: httpx.AsyncClient, rule: str, sid: str, what: str = "the close") -> None:
    body = {"resources_session_id": sid, "episode_id": c.seed_body(sid)["episode_id"]}
    _expect(rule, await _post(client, rule, "/close_session", body), 200, what, sid)


def _must_hold(c: _Contract, rule: str, sid: str, when: str, held: bool = True) -> None:
    if c.keeps_state and c.holds(sid) != held:
        state, fault = ("false", "lost") if held else ("still true", "leaks")
        raise _fail(rule, f"holds_state({sid!r}) is {state} {when}; the server {fault} the session's state")


async def check_seed(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client:
        await _seed(c, client, rule, sid)
        _must_hold(c, rule, sid, "after its seed")
        await _close(c, client, rule, sid)


async def check_idempotent_reseed(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as first, c.client() as retry:
        a = await _seed(c, first, rule, sid)
        b = await _seed(c, retry, rule, sid, "the repeated seed (a retry after a lost reply)")
        if a != b:
            raise _fail(rule, f"the repeated seed answered {b!r:.300}, the first {a!r:.300}")
        _must_hold(c, rule, sid, "after a repeated seed")
        await _close(c, first, rule, sid)


async def check_invalid_seed(c: _Contract, rule: str, sid: str) -> None:
    body = (
        c.seed_body(sid, task_data="not an object")
        if c.invalid_seed is None
        else {**copy.deepcopy(c.invalid_seed), "resources_session_id": sid}
    )
    async with c.client() as client:
        await _refused_seed(client, rule, body, 422, f"an invalid seed {json.dumps(body)[:200]}")
        _must_hold(c, rule, sid, "after a refused seed", held=False)


async def check_cookie_body_mismatch(c: _Contract, rule: str, sid: str) -> None:
    other = c.new_id(rule)
    async with c.client() as client:
        await _seed(c, client, rule, sid)
        what = f"a seed for {other!r} sent with the cookie of {sid!r}"
        await _refused_seed(client, rule, c.seed_body(other), 409, what)
        _must_hold(c, rule, other, "after a refused seed", held=False)
        await _close(c, client, rule, sid)


async def check_conflicting_seed(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as first, c.client() as second:
        await _seed(c, first, rule, sid)
        body = c.seed_body(sid, episode_id={"rollout_id": f"another-{sid}", "attempt": 0})
        await _refused_seed(second, rule, body, 409, f"a seed binding {sid!r} to another episode")
        _must_hold(c, rule, sid, "after a refused conflicting seed")
        await _close(c, first, rule, sid)


async def check_close(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client, c.client() as no_cookie:
        await _seed(c, client, rule, sid)
        await _close(c, no_cookie, rule, sid, "the close (sent without the seed's cookie)")
        _must_hold(c, rule, sid, "after its close", held=False)


async def check_repeated_close(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client:
        await _seed(c, client, rule, sid)
        await _close(c, client, rule, sid)
        await _close(c, client, rule, sid, "the repeated close")
        _must_hold(c, rule, sid, "after a repeated close", held=False)


async def check_seed_after_close(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client, c.client() as late:
        await _seed(c, client, rule, sid)
        await _close(c, client, rule, sid)
        await _refused_seed(late, rule, c.seed_body(sid), 409, f"a seed of {sid!r} after its close")
        _must_hold(c, rule, sid, "after a refused late seed", held=False)


async def check_verify_after_close(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client:
        await _seed(c, client, rule, sid)
        await _close(c, client, rule, sid)
        answer = _expect(rule, await _post(client, rule, "/verify", c.verify_body), 200, "a verify after the close")
        if not (
            answer.get("mask_sample") is True
            and answer.get("failure_kind") == "session_lost"
            and answer.get("failure_reason")
        ):
            got = {k: answer.get(k) for k in ("reward", "mask_sample", "failure_kind", "failure_reason")}
            raise _fail(
                rule,
                "a verify for a closed session must answer with lost_session_verification() "
                f"(mask_sample true, failure_kind 'session_lost', a reason), got {got}",
            )


async def check_state_released_once(c: _Contract, rule: str, sid: str) -> None:
    async with c.client() as client:
        await _seed(c, client, rule, sid)
        if c.verify_body is not None:
            body = {**c.verify_body, "close_follows": True}
            answer = _expect(rule, await _post(client, rule, "/verify", body), 200, "the episode's verify")
            if answer.get("mask_sample"):
                raise _fail(
                    rule,
                    "the verify before the close came back masked "
                    f"({answer.get('failure_kind')}: {answer.get('failure_reason')}); state was released "
                    "before the episode ended",
                )
        await _close(c, client, rule, sid)
        await _close(c, client, rule, sid, "the repeated close")
        _must_hold(c, rule, sid, "after the episode's close", held=False)
    leaked = [s for s in c.used if c.holds(s)]
    if leaked:
        raise _fail(rule, f"after every check the server still holds state for {leaked}")


BASIC_CHECKS: tuple[tuple[str, Check], ...] = (
    ("seed", check_seed),
    ("idempotent re-seed", check_idempotent_reseed),
    ("invalid seed 422", check_invalid_seed),
    ("cookie/body mismatch 409", check_cookie_body_mismatch),
    ("close", check_close),
    ("repeated close", check_repeated_close),
)
STATEFUL_CHECKS: tuple[tuple[str, Check], ...] = (
    ("conflicting seed 409", check_conflicting_seed),
    ("seed after close refused while fenced", check_seed_after_close),
    ("verify after close masked", check_verify_after_close),
    ("state released exactly once", check_state_released_once),
)


def check_resources_session_contract(
    app: Any,
    seed: dict[str, Any] | None = None,
    *,
    keeps_state: bool = True,
    holds_state: Callable[[str], bool] | None = None,
    verify_body: dict[str, Any] | None = None,
    invalid_seed: dict[str, Any] | None = None,
) -> list[str]:
    """Check a resources server (or its ASGI app) against the episode-session rules (docs/servers.md)."""
    from gymlab._sync import run_sync

    if hasattr(app, "setup_webserver"):  # a server instance
        app = app.app
    if keeps_state and holds_state is None:
        raise TypeError("keeps_state=True needs holds_state=callable(resources_session_id) -> bool")
    seed = dict(seed.model_dump(mode="json") if hasattr(seed, "model_dump") else (seed or {}))
    seed.pop("resources_session_id", None)
    contract = _Contract(app, seed, keeps_state, holds_state, verify_body, invalid_seed)
    checks = list(BASIC_CHECKS)
    if keeps_state:
        checks += [(n, f) for n, f in STATEFUL_CHECKS if verify_body is not None or n != "verify after close masked"]

    async def run() -> None:
        for rule, check in checks:
            await check(contract, rule, contract.new_id(rule))

    run_sync(run())
    return [name for name, _ in checks]
