"""An agent that keeps a note list per agent session: served with several workers by the tests."""

from __future__ import annotations

import os

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from gymlab import SESSION_ID_KEY, AgentSeedSessionRequest, SimpleAgent
from gymlab.utils import is_gymlab_fastapi_entrypoint


class NoteRequest(BaseModel):
    text: str


class NotebookAgent(SimpleAgent):
    """State lives in ``session_state[agent_session_id]``, in the worker that seeded it."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/note")(self.note)
        return app

    async def seed_agent_session(self, body: AgentSeedSessionRequest) -> None:
        self.session_state[body.agent_session_id] = {"task": body.task_id.task_id, "pid": os.getpid(), "notes": []}

    async def note(self, request: Request, body: NoteRequest) -> dict:
        sid = request.session[SESSION_ID_KEY]
        state = self.session_state.get(sid)
        if state is None:
            raise HTTPException(404, f"no agent session {sid!r} is held here; seed it with POST /v1/agent_sessions")
        state["notes"].append(body.text)
        return {"pid": os.getpid(), "seeded_by": state["pid"], "notes": list(state["notes"])}


if __name__ == "__main__":
    NotebookAgent.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    app = NotebookAgent.run_webserver()  # noqa: F401
