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


@dataclass
class _Contract:
    """The checks' view of one server; ``rule`` is the rule being checked, named by every failure."""

    app: Any
    seed: dict[str, Any]
    keeps_state: bool
    holds_state: Callable[[str], bool] | None
    verify_body: dict[str, Any] | None
    invalid_seed: dict[str, Any] | None
    rule: str = ""
    used: list[str] = field(default_factory=list)

    def new_id(self) -> str:
        sid = f"contract-{self.rule.split()[0]}-{uuid.uuid4().hex[:12]}"
        self.used.append(sid)
        return sid

    def fail(self, detail: str) -> SessionContractError:
        return SessionContractError(self.rule, detail)

    def seed_body(self, sid: str, **changes: Any) -> dict[str, Any]:
        body = copy.deepcopy(self.seed)
        body.setdefault("episode_id", {"rollout_id": f"rollout-{sid}", "attempt": 0})
        body.update(changes, resources_session_id=sid)
        return body

    def client(self) -> httpx.AsyncClient:
        """A fresh cookie jar: one episode's view of the server."""
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://resources.test")

    async def post(self, client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
        try:
            return await client.post(path, json=body)
        except Exception as exc:  # an app that raises through the transport answered nothing
            raise self.fail(f"POST {path} raised {type(exc).__name__}: {exc}") from exc

    async def answer(self, client: httpx.AsyncClient, path: str, body: Any, what: str, sid: str | None = None) -> Any:
        """The JSON answer (HTTP 200) to ``body``; with ``sid``, an object naming that session."""
        reply = await self.post(client, path, body)
        if reply.status_code != 200:
            raise self.fail(f"{what}: expected HTTP 200, got {_said(reply)}")
        try:
            answer = reply.json()
        except ValueError:
            raise self.fail(f"{what}: the answer is not JSON: {reply.text[:200]!r}") from None
        if sid is not None and (not isinstance(answer, dict) or answer.get("resources_session_id") != sid):
            raise self.fail(f"{what}: expected an answer naming resources_session_id {sid!r}, got {answer!r:.300}")
        return answer

    async def refused(self, client: httpx.AsyncClient, body: Any, status: int, what: str) -> None:
        reply = await self.post(client, "/seed_session", body)
        if reply.status_code != status:
            raise self.fail(f"{what} must be refused with {status}, got {_said(reply)}")

    async def seeded(self, client: httpx.AsyncClient, sid: str, what: str = "the seed") -> dict:
        answer = await self.answer(client, "/seed_session", self.seed_body(sid), what, sid)
        if "observation" in answer and not (answer["observation"] is None or isinstance(answer["observation"], str)):
            raise self.fail(f"{what}: observation must be a string or null, got {answer['observation']!r:.100}")
        return answer

    async def close(self, client: httpx.AsyncClient, sid: str, what: str = "the close") -> None:
        body = {"resources_session_id": sid, "episode_id": self.seed_body(sid)["episode_id"]}
        await self.answer(client, "/close_session", body, what, sid)

    def holds(self, sid: str) -> bool:
        return bool(self.holds_state(sid)) if self.holds_state is not None else False

    def must_hold(self, sid: str, when: str, held: bool = True) -> None:
        if self.keeps_state and self.holds(sid) != held:
            state, fault = ("false", "lost") if held else ("still true", "leaks")
            raise self.fail(f"holds_state({sid!r}) is {state} {when}; the server {fault} the session's state")


def _said(reply: httpx.Response) -> str:
    return f"HTTP {reply.status_code} {reply.text[:300]}"


async def check_seed(c: _Contract, sid: str) -> None:
    async with c.client() as client:
        await c.seeded(client, sid)
        c.must_hold(sid, "after its seed")
        await c.close(client, sid)


async def check_idempotent_reseed(c: _Contract, sid: str) -> None:
    async with c.client() as first, c.client() as retry:
        a = await c.seeded(first, sid)
        b = await c.seeded(retry, sid, "the repeated seed (a retry after a lost reply)")
        if a != b:
            raise c.fail(f"the repeated seed answered {b!r:.300}, the first {a!r:.300}")
        c.must_hold(sid, "after a repeated seed")
        await c.close(first, sid)


async def check_invalid_seed(c: _Contract, sid: str) -> None:
    body = (
        c.seed_body(sid, task_data="not an object")
        if c.invalid_seed is None
        else {**copy.deepcopy(c.invalid_seed), "resources_session_id": sid}
    )
    async with c.client() as client:
        await c.refused(client, body, 422, f"an invalid seed {json.dumps(body)[:200]}")
        c.must_hold(sid, "after a refused seed", held=False)


async def check_cookie_body_mismatch(c: _Contract, sid: str) -> None:
    other = c.new_id()
    async with c.client() as client:
        await c.seeded(client, sid)
        await c.refused(client, c.seed_body(other), 409, f"a seed for {other!r} sent with the cookie of {sid!r}")
        c.must_hold(other, "after a refused seed", held=False)
        await c.close(client, sid)


async def check_conflicting_seed(c: _Contract, sid: str) -> None:
    async with c.client() as first, c.client() as second:
        await c.seeded(first, sid)
        body = c.seed_body(sid, episode_id={"rollout_id": f"another-{sid}", "attempt": 0})
        await c.refused(second, body, 409, f"a seed binding {sid!r} to another episode")
        c.must_hold(sid, "after a refused conflicting seed")
        await c.close(first, sid)


async def check_close(c: _Contract, sid: str) -> None:
    async with c.client() as client, c.client() as no_cookie:
        await c.seeded(client, sid)
        await c.close(no_cookie, sid, "the close (sent without the seed's cookie)")
        c.must_hold(sid, "after its close", held=False)


async def check_repeated_close(c: _Contract, sid: str) -> None:
    async with c.client() as client:
        await c.seeded(client, sid)
        await c.close(client, sid)
        await c.close(client, sid, "the repeated close")
        c.must_hold(sid, "after a repeated close", held=False)


async def check_seed_after_close(c: _Contract, sid: str) -> None:
    async with c.client() as client, c.client() as late:
        await c.seeded(client, sid)
        await c.close(client, sid)
        await c.refused(late, c.seed_body(sid), 409, f"a seed of {sid!r} after its close")
        c.must_hold(sid, "after a refused late seed", held=False)


async def check_verify_after_close(c: _Contract, sid: str) -> None:
    async with c.client() as client:
        await c.seeded(client, sid)
        await c.close(client, sid)
        answer = await c.answer(client, "/verify", c.verify_body, "a verify after the close")
    lost = answer.get("mask_sample") is True and answer.get("failure_kind") == "session_lost"
    if not (lost and answer.get("failure_reason")):
        got = {k: answer.get(k) for k in ("reward", "mask_sample", "failure_kind", "failure_reason")}
        raise c.fail(
            "a verify for a closed session must answer with lost_session_verification() "
            f"(mask_sample true, failure_kind 'session_lost', a reason), got {got}"
        )


async def check_state_released_once(c: _Contract, sid: str) -> None:
    async with c.client() as client:
        await c.seeded(client, sid)
        if c.verify_body is not None:
            body = {**c.verify_body, "close_follows": True}
            answer = await c.answer(client, "/verify", body, "the episode's verify")
            if answer.get("mask_sample"):
                raise c.fail(
                    "the verify before the close came back masked "
                    f"({answer.get('failure_kind')}: {answer.get('failure_reason')}); state was released "
                    "before the episode ended"
                )
        await c.close(client, sid)
        await c.close(client, sid, "the repeated close")
        c.must_hold(sid, "after the episode's close", held=False)
    leaked = [s for s in c.used if c.holds(s)]
    if leaked:
        raise c.fail(f"after every check the server still holds state for {leaked}")


#: Every rule, in the order checked: (name, check, needs: "" for every server, "state", or "verify" too).
CHECKS: tuple[tuple[str, Callable[[_Contract, str], Awaitable[None]], str], ...] = (
    ("seed", check_seed, ""),
    ("idempotent re-seed", check_idempotent_reseed, ""),
    ("invalid seed 422", check_invalid_seed, ""),
    ("cookie/body mismatch 409", check_cookie_body_mismatch, ""),
    ("close", check_close, ""),
    ("repeated close", check_repeated_close, ""),
    ("conflicting seed 409", check_conflicting_seed, "state"),
    ("seed after close refused while fenced", check_seed_after_close, "state"),
    ("verify after close masked", check_verify_after_close, "verify"),
    ("state released exactly once", check_state_released_once, "state"),
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
    has = {"", "state", "verify"} if keeps_state and verify_body is not None else {"", "state"} if keeps_state else {""}
    checks = [(rule, check) for rule, check, needs in CHECKS if needs in has]

    async def run() -> None:
        for rule, check in checks:
            contract.rule = rule
            await check(contract, contract.new_id())

    run_sync(run())
    return [rule for rule, _ in checks]
