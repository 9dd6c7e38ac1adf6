"""``lab.logs()``: the errors the servers logged, one line each, with the full trace on demand."""

from __future__ import annotations

import html

from gymlab._traces import Entry


class LogView(list):
    """Log entries (``gymlab._traces.Entry``): the full text in ``repr``, collapsible traces in HTML."""

    def __repr__(self) -> str:
        return "\n\n".join(map(str, self)) or "<no errors logged>"

    def _repr_html_(self) -> str:
        if not self:
            return "<p><i>no errors logged</i></p>"
        parts = []
        for entry in self:
            line = html.escape(str(entry).splitlines()[0])
            trace = html.escape(entry.trace) if entry.trace else ""
            body = f"<pre style='text-align:left;white-space:pre-wrap'>{trace}</pre>" if trace else ""
            parts.append(f"<details style='text-align:left'><summary><code>{line}</code></summary>{body}</details>")
        return "<div class='gymlab-logs'>" + "".join(parts) + "</div>"

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return LogView(item) if isinstance(index, slice) else item


__all__ = ["Entry", "LogView"]
