"""An environment built on an MCP server: the model saves a note with the notes server's tools.

``notes_mcp.py`` is the MCP server, launched over stdio once per episode (``mcp_command``), so an
episode's notes are its own process's. ``NotesServer`` serves its tools as routes for simple_agent;
``verify`` reads the note back through the same episode's MCP session and pays 1.0 when the note
asked for was saved with the text asked for. The rows' tools come from ``mcp_tools_from``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from fastapi import Request
from pydantic import Field

from gymlab import BaseVerifyRequest, BaseVerifyResponse, McpResourcesServer, function_call

#: The notes MCP server, as ``NotesServer`` launches it.
NOTES_COMMAND = [sys.executable, str(Path(__file__).with_name("notes_mcp.py"))]


class NotesVerifyRequest(BaseVerifyRequest):
    title: str
    text: str


class NotesVerifyResponse(BaseVerifyResponse):
    title: str
    text: str
    saved: str | None = None


class NotesServer(McpResourcesServer):
    mcp_command: list[str] | None = Field(default_factory=lambda: list(NOTES_COMMAND))

    async def verify(self, request: Request, body: NotesVerifyRequest) -> NotesVerifyResponse:
        """1.0 when the episode's notes hold ``body.title`` with exactly ``body.text``."""
        result = await self.call_mcp_tool(request, "read_note", {"title": body.title})
        saved = None if result.is_error else (result.structured_content or {}).get("text")
        return NotesVerifyResponse(**body.model_dump(), reward=float(saved == body.text), saved=saved)


_ASK = re.compile(r"titled '([^']*)' with the text '([^']*)'")


def policy(request):
    """Rule-based model: save the note the user asked for, then say so."""
    items = request.input_items()
    last = items[-1] if items else None
    if last is not None and last.type == "function_call_output":
        try:
            saved = json.loads(last.output)
        except ValueError:
            return f"The notes tool failed: {last.output}"
        return f"Saved the note {saved.get('title')!r}."
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    asked = _ASK.search(text)
    if asked and any(t.name == "write_note" for t in request.tools):
        return [function_call("write_note", {"title": asked[1], "text": asked[2]})]
    return "I cannot tell which note to save."


from gymlab.utils import is_gymlab_fastapi_entrypoint  # noqa: E402

if __name__ == "__main__":
    NotesServer.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    app = NotesServer.run_webserver()  # noqa: F401
