"""SimpleResourcesServer: the seed/verify protocol, extended with tool routes by subclasses."""

from __future__ import annotations

import statistics
from abc import abstractmethod
from collections import defaultdict
from typing import Any

from fastapi import FastAPI

from gymlab.protocol import (
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
)
from gymlab.server import BaseServer


def reward_stats(rewards: list[float], prefix: str = "") -> dict[str, float]:
    """mean/max/min/median/std of rewards (population std; empty input gives no keys)."""
    if not rewards:
        return {}
    return {
        f"mean/{prefix}reward": statistics.fmean(rewards),
        f"max/{prefix}reward": max(rewards),
        f"min/{prefix}reward": min(rewards),
        f"median/{prefix}reward": statistics.median(rewards),
        f"std/{prefix}reward": statistics.pstdev(rewards),
    }


def aggregate_metrics(verify_responses: list[dict[str, Any]]) -> AggregateMetrics:
    """Metrics over verify responses; masked samples are counted but kept out of reward metrics."""
    kept = [r for r in verify_responses if not r.get("mask_sample")]
    rewards = [float(r.get("reward", 0.0)) for r in kept]
    agent = reward_stats(rewards)
    agent["num_samples"] = len(verify_responses)
    agent["num_masked"] = len(verify_responses) - len(kept)
    groups: dict[Any, list[float]] = defaultdict(list)
    for r in kept:
        groups[r.get("_ng_task_index")].append(float(r.get("reward", 0.0)))
    group_level = [
        {"_ng_task_index": k, "num_rollouts": len(v), **reward_stats(v)}
        for k, v in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] if kv[0] is not None else 0))
    ]
    key = {k: agent[k] for k in ("mean/reward",) if k in agent}
    if len(groups) and all(len(v) > 0 for v in groups.values()):
        key["pass@k/mean"] = statistics.fmean(float(max(v) >= 1.0) for v in groups.values()) if groups else 0.0
    return AggregateMetrics(agent_metrics=agent, key_metrics=key, group_level_metrics=group_level)


class SimpleResourcesServer(BaseServer):
    """Seed/verify environment: override ``verify`` (and ``seed_session`` for state)."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/seed_session")(self.seed_session)
        app.post("/verify")(self.verify)
        app.post("/aggregate_metrics")(self.aggregate_metrics)
        return app

    async def seed_session(self, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        """Initialise an episode; the default does nothing."""
        return BaseSeedSessionResponse()

    @abstractmethod
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        """Grade the completed trajectory."""

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        return aggregate_metrics(body.verify_responses)
