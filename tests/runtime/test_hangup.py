"""CancelOnHangup runs the handler in the request's task: a hang-up cancels it and the cancellation ends there;
any other cancellation goes on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gymlab._runtime.hangup import CancelOnHangup

SCOPE = {"type": "http", "method": "POST", "path": "/run"}


def _client(hang_up: asyncio.Event):
    body = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive():
        if body:
            return body.pop()
        await hang_up.wait()
        return {"type": "http.disconnect"}

    return receive


async def _noop_send(message):
    pass


def test_a_hang_up_cancels_the_handler_and_its_cancellation_ends_in_the_middleware(caplog):
    async def main():
        started, hang_up, cancelled = asyncio.Event(), asyncio.Event(), []

        async def app(scope, receive, send):
            await receive()
            started.set()
            try:
                await asyncio.Event().wait()  # endless work
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        task = asyncio.ensure_future(CancelOnHangup(app)(SCOPE, _client(hang_up), _noop_send))
        await started.wait()
        hang_up.set()
        await task  # returns: the hang-up's cancellation does not leave the middleware
        assert cancelled == [True] and not task.cancelled()
        # the request's task carries no cancellation left over: a later await in it is not cancelled
        assert all(t.cancelling() == 0 for t in asyncio.all_tasks())

    with caplog.at_level(logging.INFO, logger="gymlab.server"):
        asyncio.run(main())
    assert any("the client hung up" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("hung_up_too", [False, True])
def test_a_cancellation_from_elsewhere_goes_on(hung_up_too):
    async def main():
        started, hang_up, hang_up_seen = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def app(scope, receive, send):
            await receive()
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                hang_up_seen.set()
                if hung_up_too:
                    await asyncio.Event().wait()  # a slow clean-up, cancelled by the server below
                raise

        task = asyncio.ensure_future(CancelOnHangup(app)(SCOPE, _client(hang_up), _noop_send))
        await started.wait()
        if hung_up_too:  # the server cancels the request while the hang-up's cancellation is being handled
            hang_up.set()
            await hang_up_seen.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(main())
