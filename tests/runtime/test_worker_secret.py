"""With several workers the session secret reaches them through a private 0600 file, never their
environment, and a cookie signed by one worker still verifies on the other."""

from __future__ import annotations

import asyncio
import os

from tests.runtime.test_workers import COUNTER, _episodes_until_spread, served

SECRET = "gymlab-test-secret-0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"


def _group_members(pgid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:  # field 5 of stat: the process group
                pids.append(int(name))
    return pids


def test_workers_get_the_secret_outside_their_environment_and_cookies_verify_across_them():
    with served(COUNTER, workers=2, session_secret=SECRET) as (url, proc):
        workers = [pid for pid in _group_members(proc.pid) if pid != proc.pid]
        assert len(workers) >= 2, workers
        for pid in workers:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            assert SECRET.encode() not in environ, f"worker {pid}'s environment holds the session secret"

        # batches until requests crossed workers (a busy machine can hand one worker a whole batch)
        results = asyncio.run(_episodes_until_spread(url, 8, 6))
        assert all(r["reward"] == 1.0 for r in results)
        assert all(set(r["statuses"]) == {200} for r in results)
        served_by = set().union(*(r["receivers"] for r in results))
        assert len(served_by) == 2, f"every request landed on one worker ({served_by}); nothing crossed"
