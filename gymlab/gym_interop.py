"""Gymnasium interop: a ``gymnasium.Env`` over one GymnasiumServer session, served (``ServedEnv``) or
in-process (``InProcessEnv``), with text observations and actions, so ``check_env`` applies (docs/envs.md)."""

from __future__ import annotations

import abc
import json
import string
import uuid
import warnings
from typing import Any, Literal

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "gymlab.gym_interop needs the 'gymnasium' package, which is not installed. "
        "Install it with `pip install gymlab[gymnasium]`."
    ) from exc

from gymlab._http.client import Client, Cookies
from gymlab._sync import run_sync
from gymlab.errors import ServerError
from gymlab.models.policy import to_response
from gymlab.protocol import (
    RESERVED_INFO_KEYS,
    FunctionCall,
    GymnasiumResetRequest,
    GymnasiumResetResponse,
    GymnasiumStepRequest,
    GymnasiumStepResponse,
    NeMoGymResponse,
)
from gymlab.resources.gymnasium import GymnasiumServer

#: Printable ASCII, whitespace included: the default charset of both text spaces.
PRINTABLE = string.printable

ActionMode = Literal["text", "function_call"]


class SessionEnv(gymnasium.Env, abc.ABC):
    """The shared half: spaces, seeding, action -> response, step answer -> Gymnasium tuple. ``row`` is
    the row every ``/reset`` and ``/step`` carries; each reset sets its ``seed_field`` (docs/envs.md)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        row: dict[str, Any],
        *,
        action_mode: ActionMode = "text",
        max_observation_length: int = 8192,
        max_action_length: int = 64,
        charset: str = PRINTABLE,
        seed_field: str | None = "seed",
    ):
        if action_mode not in ("text", "function_call"):
            raise ValueError(f"action_mode must be 'text' or 'function_call', not {action_mode!r}")
        GymnasiumResetRequest.model_validate(row)  # a bad row fails here, not at the first reset
        self.row = dict(row)
        self.action_mode = action_mode
        self.seed_field = seed_field
        self.observation_space: spaces.Text = spaces.Text(
            max_length=max_observation_length, min_length=0, charset=charset
        )
        self.action_space = spaces.Text(max_length=max_action_length, min_length=1, charset=charset)
        self._episode_row = dict(row)
        self._steps = 0

    @abc.abstractmethod
    def _call(self, path: str, body: dict) -> Any:
        """The JSON answer to ``POST path`` (``/reset`` or ``/step``) with ``body``, or its in-process equal."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; ``options`` are merged into the row's top-level fields."""
        super().reset(seed=seed)
        row = {**self.row, **(options or {})}
        if self.seed_field is not None and not (options and self.seed_field in options):
            row[self.seed_field] = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self._episode_row, self._steps = row, 0
        answer = GymnasiumResetResponse.model_validate(self._call("/reset", row))
        return self._observation(answer.observation), dict(answer.info)

    def step(self, action: Any):
        response = self.action_response(action).model_dump(mode="json", exclude_none=True)
        self._steps += 1
        answer = GymnasiumStepResponse.model_validate(self._call("/step", {**self._episode_row, "response": response}))
        info = dict(answer.info)
        if answer.mask_sample or answer.failure_kind is not None or answer.failure_reason is not None:
            info.update({k: getattr(answer, k) for k in RESERVED_INFO_KEYS})
        return self._observation(answer.observation), answer.reward, answer.terminated, answer.truncated, info

    def action_response(self, action: Any) -> NeMoGymResponse:
        """The model response a Gymnasium action stands for."""
        if isinstance(action, str) and self.action_mode == "function_call":
            name, _, arguments = action.strip().partition(" ")
            call_id = (
                f"call_{self._steps}"  # from the step index: stepping stays deterministic (check_step_determinism)
            )
            action = [FunctionCall(name=name, arguments=arguments.strip() or "{}", call_id=call_id, status="completed")]
        return to_response(action if isinstance(action, (NeMoGymResponse, dict, list, tuple, str)) else [action])

    def _observation(self, observation: str | None) -> str:
        text = observation or ""
        space = self.observation_space
        if len(text) > space.max_length:
            raise ValueError(
                f"{type(self).__name__}: an observation of {len(text)} characters exceeds "
                f"max_observation_length={space.max_length}; pass a larger max_observation_length"
            )
        bad = sorted({c for c in text if c not in space.character_set})
        if bad:
            raise ValueError(
                f"{type(self).__name__}: the observation has characters outside the charset: "
                f"{''.join(bad)!r}; pass charset= with them"
            )
        return text


class ServedEnv(SessionEnv):
    """A ``gymnasium.Env`` over one session of a served GymnasiumServer (a URL, with a client of its own,
    or a Lab handle, through its Lab's client)."""

    def __init__(self, server: Any, row: dict[str, Any], **options: Any):
        super().__init__(row, **options)
        self.url = server if isinstance(server, str) else server.url
        self._own_client = isinstance(server, str)
        self.client: Client = Client() if self._own_client else server.server.client
        self._cookies: Cookies | None = Cookies()

    def _call(self, path: str, body: dict) -> Any:
        if self._cookies is None:
            raise RuntimeError(f"{type(self).__name__} over {self.url} is closed; make a new one")
        return run_sync(self.client.post_ok(self.url, path, body, self._cookies, server=self.url))

    def close(self) -> None:
        """Release the session's episode on the server (a server without ``/close`` answers 404)."""
        cookies, self._cookies = self._cookies, None
        if cookies is not None and cookies.header(self.url):
            try:
                run_sync(self.client.post_ok(self.url, "/close", {}, cookies, server=self.url))
            except ServerError as exc:  # its error names the server, the route, the status and the cause
                if exc.status != 404:
                    warnings.warn(f"{type(self).__name__}: could not release the episode: {exc}", RuntimeWarning, 2)
        if cookies is not None and self._own_client:
            run_sync(self.client.close())
        super().close()


class InProcessEnv(SessionEnv):
    """The same env as ``ServedEnv``, calling a GymnasiumServer (class or instance) in this process,
    its bodies and answers through the wire models and JSON exactly as over HTTP."""

    def __init__(self, server: type[GymnasiumServer] | GymnasiumServer, row: dict[str, Any], **options: Any):
        super().__init__(row, **options)
        self.server = server() if isinstance(server, type) else server
        self.session_id = uuid.uuid4().hex

    def _call(self, path: str, body: dict) -> Any:
        if path == "/reset":
            answer = self.server.reset_session(GymnasiumResetRequest.model_validate(body).metadata(), self.session_id)
        else:
            request = GymnasiumStepRequest.model_validate(body)
            answer = self.server.step_session(request.response, request.metadata(), self.session_id)
        return json.loads(run_sync(answer).model_dump_json())

    def close(self) -> None:
        run_sync(self.server.close_episode(self.session_id))
        super().close()


SERVED_ID = "gymlab/Served-v0"
IN_PROCESS_ID = "gymlab/InProcess-v0"

for _id, _cls in ((SERVED_ID, "ServedEnv"), (IN_PROCESS_ID, "InProcessEnv")):
    if _id not in gymnasium.registry:
        gymnasium.register(id=_id, entry_point=f"gymlab.gym_interop:{_cls}")

__all__ = ["IN_PROCESS_ID", "PRINTABLE", "SERVED_ID", "InProcessEnv", "ServedEnv", "SessionEnv"]
