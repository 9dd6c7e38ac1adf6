"""A release that fails never costs a graded episode its reward: the record stands and the release is
retried in the background (``BaseAgent.release_retries``) until the environment frees the session.

Each environment's release raises once, as a lost container daemon would; the servers are real
(in-process and over loopback HTTP) and every wait is on a condition.
"""

import pytest
from fastapi import Request

from gymlab import ServerError, SingleAgentTurn
from gymlab.examples import load_environment
from gymlab.lab import AgentHandle
from gymlab.testing.workers import wait_until

blackjack = load_environment("blackjack")


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


def flaky_counter(counter, fails: int = 1):
    """The counter, whose release raises the first ``fails`` times (the state stays held for a retry)."""

    class FlakyCounter(counter.CounterServer):
        attempts: list = []

        async def close_resources_session(self, resources_session_id: str) -> None:
            self.attempts.append(resources_session_id)
            if len(self.attempts) <= fails:
                raise ConnectionError("docker daemon unreachable")
            await super().close_resources_session(resources_session_id)

    return FlakyCounter


def quick(handle, **settings):
    """Make the agent's retries quick (the defaults wait 0.5 s, then twice as long each time)."""
    retries = handle.server.release_retries
    retries.first_delay = settings.get("first_delay", 0.05)
    retries.attempts = settings.get("attempts", retries.attempts)
    return retries


def test_single_agent_turn_keeps_the_graded_reward_and_retries_the_close(lab, counter, rows):
    env = lab.serve(flaky_counter(counter), attempts=[])
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    retries = quick(turn)
    row = rows("counter")[0]
    rollout = turn.run({"task_id": "counter/0", "task_input": row})
    assert (rollout.reward, rollout.mask_sample, rollout.failure_kind) == (1.0, False, None)
    assert rollout.model_extra["final_count"] == row["target"]
    (sid,) = env.server.attempts  # the close after grading failed once...
    wait_until(lambda: retries.counts()["released"] == 1, 30, "the close retried")
    assert env.server.attempts == [sid, sid]  # ...and its retry ran the release again, for the same session
    assert env.server.session_state == {} and len(env.server.episode_sessions) == 0
    assert retries.counts() == {"pending": 0, "released": 1, "given_up": 0}


def test_gymnasium_agent_keeps_a_cut_episodes_reward_and_retries_its_close(lab, rows):
    class FlakyBlackjack(blackjack.BlackjackEnv):
        closes: list = []

        async def close_session(self, session_id):
            self.closes.append(session_id)
            if len(self.closes) == 1:
                raise ConnectionError("the table's dealer process is gone")
            await super().close_session(session_id)

    env = lab.serve(FlakyBlackjack, closes=[])
    model = lab.serve_model(lambda request: "I think I will wait.", name="waiting_policy")
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=model, max_steps=3)
    retries = quick(agent)
    rollout = agent.run(rows("blackjack")[2])  # cut by max_steps: the agent closes the hand
    assert rollout.truncated and rollout.reward == pytest.approx(-0.3) and not rollout.mask_sample
    wait_until(lambda: retries.counts()["released"] == 1, 30, "the close retried")
    assert len(env.server.closes) == 2  # the failed close kept the hand, and its retry released it
    assert env.server.session_state == {}


def test_simple_agent_grades_by_verify_and_retries_a_failed_release_after_a_failure(lab, counter, rows):
    """simple_agent's verify is its release (nothing can fail after the grade); the release after a
    failure that fails once keeps the failure's kind, says so, and is retried until the state is freed."""
    env = lab.serve(flaky_counter(counter), attempts=[])
    graded = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    assert graded.run(rows("counter")[0]).reward == 1.0
    assert env.server.attempts == [] and env.server.session_state == {}

    def broken(request):
        raise RuntimeError("model crashed")

    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(broken), name="broken_agent")
    retries = quick(agent)
    with pytest.raises(ServerError) as err:
        agent.run(rows("counter")[0])
    assert err.value.status == 502 and err.value.failure.kind == "provider_unavailable"
    assert "releasing the session (/close_session) also failed" in err.value.failure.message
    assert len(env.server.session_state) == 1  # held: the release raised
    wait_until(lambda: env.server.session_state == {}, 30, "the release retried")
    assert len(env.server.attempts) == 2 and retries.counts()["released"] == 1


def test_a_release_that_never_succeeds_is_given_up_after_its_attempts(lab, counter, rows):
    env = lab.serve(flaky_counter(counter, fails=100), attempts=[])
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    retries = quick(turn, first_delay=0.01, attempts=3)
    assert turn.run({"task_input": rows("counter")[0]}).reward == 1.0
    given_up = {"pending": 0, "released": 0, "given_up": 1}
    wait_until(lambda: retries.counts() == given_up, 30, "the retries given up and none pending")
    assert len(env.server.attempts) == 4  # the first close and three retries, then no more
    assert len(env.server.episode_sessions) == 1  # left to the environment's idle-session reaper


def test_a_refused_release_is_not_retried(lab, counter, rows):
    class Refusing(counter.CounterServer):
        refused: list = []

        async def _close_session_route(self, request: Request, body: dict):  # a 4xx no retry can fix
            from fastapi import HTTPException

            self.refused.append(body)
            raise HTTPException(409, "that session belongs to another episode")

    env = lab.serve(Refusing, refused=[])
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    retries = quick(turn)
    assert turn.run({"task_input": rows("counter")[0]}).reward == 1.0
    assert len(env.server.refused) == 1 and retries.counts() == {"pending": 0, "released": 0, "given_up": 0}


def test_many_concurrent_failed_releases_are_all_retried(lab, counter, rows):
    env = lab.serve(flaky_counter(counter, fails=20), attempts=[])
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    retries = quick(turn)
    tasks = [{"task_id": f"counter/{i}", "task_input": rows("counter")[0]} for i in range(40)]
    results = lab.run_many(turn, tasks, concurrency=40, on_error="raise")
    assert [r.reward for r in results] == [1.0] * 40
    # the server frees a session before the retry that closed it has read the answer: wait for both
    wait_until(
        lambda: env.server.session_state == {} and retries.counts()["pending"] == 0, 60, "every session released"
    )
    assert retries.counts()["given_up"] == 0


def test_stopping_the_agent_stops_its_waiting_retries(lab, counter, rows):
    env = lab.serve(flaky_counter(counter, fails=100), attempts=[])
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    retries = quick(turn, first_delay=600)  # the retry would wait ten minutes
    assert turn.run({"task_input": rows("counter")[0]}).reward == 1.0
    assert retries.counts()["pending"] == 1
    turn.stop()
    wait_until(lambda: retries.counts()["pending"] == 0, 30, "the retry stopped with its server")
    assert len(env.server.attempts) == 1  # nothing more was sent; the environment's reaper frees it
