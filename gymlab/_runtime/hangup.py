"""A caller that hangs up cancels its request's work (Starlette would keep running the handler)."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("gymlab.server")


class CancelOnHangup:
    """Cancel the handler of a request to one of ``paths`` when its client disconnects."""

    def __init__(self, app, paths: frozenset[str] = frozenset({"/run"})):
        self.app, self.paths = app, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        body_read = asyncio.Event()
        handler = asyncio.current_task()
        assert handler is not None  # an ASGI app runs in a task
        hung_up = done = False

        async def tracking_receive():
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            nonlocal hung_up
            await body_read.wait()
            # After the body, the server's receive() returns only when the client disconnects or
            # the answer is complete; only the first, with the handler still running, is a hang-up.
            if (await receive())["type"] == "http.disconnect" and not done:
                hung_up = True
                handler.cancel()

        watcher = asyncio.ensure_future(watch())  # the handler runs in this task: one task per request, not two
        try:
            await self.app(scope, tracking_receive, send)
        except asyncio.CancelledError:
            if not hung_up or handler.cancelling() > 1:  # cancelled by another too: that cancellation goes on
                raise
            log.info("%s %s: the client hung up; its work was cancelled", scope["method"], scope["path"])
        finally:
            done = True
            watcher.cancel()
            if hung_up:
                handler.uncancel()  # the hang-up's own cancellation ends here
