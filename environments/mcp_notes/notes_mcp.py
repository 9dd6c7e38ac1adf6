"""A small MCP server written for the mcp_notes environment: a notebook of titled notes.

Run it over stdio (``python notes_mcp.py``), the way ``NotesServer`` launches it: one process per
episode, so the notes of an episode are its process's and vanish with it. Tools: ``write_note``,
``read_note`` and ``list_notes``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("notes")
NOTES: dict[str, str] = {}  # this process's notes: one episode's


class Saved(BaseModel):
    title: str
    notes: int


class Note(BaseModel):
    title: str
    text: str


class Titles(BaseModel):
    titles: list[str]


@server.tool()
def write_note(title: str, text: str) -> Saved:
    """Save a note under a title (an existing note of that title is replaced)."""
    if not title.strip():
        raise ValueError("a note needs a title")
    NOTES[title] = text
    return Saved(title=title, notes=len(NOTES))


@server.tool()
def read_note(title: str) -> Note:
    """Read the note saved under a title."""
    if title not in NOTES:
        raise ValueError(f"no note titled {title!r}; titles: {', '.join(sorted(NOTES)) or 'none'}")
    return Note(title=title, text=NOTES[title])


@server.tool()
def list_notes() -> Titles:
    """The titles of every saved note."""
    return Titles(titles=sorted(NOTES))


if __name__ == "__main__":
    server.run()  # stdio
