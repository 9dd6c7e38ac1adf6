"""Notebook 09 (tools over MCP) executed in a real kernel; the checks live here (a probe cell)."""

from tests.notebooks.kernel import run_notebook

PROBE = """{
    "tools": [t["name"] for t in tools],
    "rewards": [r.reward for r in runs],
    "open_mcp_sessions": env.server.open_mcp_sessions,
    "listed": listed,
    "count": answer.structured_content,
    "after": after,
}"""


def test_09_mcp_tools():
    out, _ = run_notebook("09_mcp_tools.ipynb", PROBE)
    assert out["tools"] == ["write_note", "read_note", "list_notes"]
    assert out["rewards"] == [1.0, 1.0]  # the notebook's own row and the example's first
    assert out["open_mcp_sessions"] == 0
    assert out["listed"] == ["increment"]  # no lifecycle route is a tool
    assert out["count"] == {"count": 7} and out["after"] == {"count": 8}
