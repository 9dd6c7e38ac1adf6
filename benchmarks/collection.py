"""Benchmark figures for collection: rollouts/s through ``collect`` in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymlab.collection import collect


def collection_throughput(n_rows: int = 10_000, concurrency: int = 32) -> dict[str, Any]:
    """Rollouts/s of ``collect`` over ``n_rows`` rows of a trivial environment (for ``make bench``).

    The resources server grades every episode 1.0, the model answers with one message, and all three
    servers run in threads of this process; the output goes to a temporary folder.
    """
    import tempfile

    from gymlab.lab import Lab
    from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
    from gymlab.resources.simple import SimpleResourcesServer

    async def verify(self, body):
        return BaseVerifyResponse(
            responses_create_params=body.responses_create_params, response=body.response, reward=1.0
        )

    # Real annotations (not strings): FastAPI reads them to parse the body.
    verify.__annotations__ = {"body": BaseVerifyRequest, "return": BaseVerifyResponse}
    TrivialServer = type("TrivialServer", (SimpleResourcesServer,), {"verify": verify, "__module__": __name__})

    rows = [{"responses_create_params": {"input": f"task {i}"}} for i in range(n_rows)]
    with Lab() as lab, tempfile.TemporaryDirectory() as tmp:
        env = lab.serve(TrivialServer, name="trivial")
        model = lab.serve_model(lambda request: "done")
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        result = collect(
            rows,
            Path(tmp) / "bench.jsonl",
            agent_url=agent.url,
            resources_url=env.url,
            agent="simple_agent",
            concurrency=concurrency,
            progress=False,
        )
    if result.n_failures or result.n_rollouts != n_rows:  # (counts: the files went with the temporary folder)
        raise RuntimeError(f"collection benchmark lost rollouts: {result!r}")
    return {
        "rows": n_rows,
        "concurrency": concurrency,
        "seconds": round(result.duration_s, 3),
        "rollouts/s": round(n_rows / result.duration_s, 1),
    }
