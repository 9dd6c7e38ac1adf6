"""check_resources_session_contract: passes on the example servers, names the rule a broken server breaks."""

import pytest
from pydantic import PrivateAttr

from gymlab import SessionContractError
from gymlab.examples import example_rows, load_environment
from gymlab.testing import check_resources_session_contract

ALL_RULES = [
    "seed",
    "idempotent re-seed",
    "invalid seed 422",
    "cookie/body mismatch 409",
    "close",
    "repeated close",
    "conflicting seed 409",
    "seed after close refused while fenced",
    "verify after close masked",
    "state released exactly once",
]
COUNTER_SEED = {"task_id": {"taskset": "counter", "task_id": "0"}, "task_data": {"initial_count": 1}}


def counter_verify_body():
    row = example_rows("counter")[0]
    return {**row, "target": 1, "response": {"output": []}}  # seeded at 1, never incremented: reward 1


def check_counter(server, **overrides):
    kwargs = dict(
        keeps_state=True, holds_state=lambda sid: sid in server.session_state, verify_body=counter_verify_body()
    )
    return check_resources_session_contract(server, COUNTER_SEED, **{**kwargs, **overrides})


def test_counter_passes_every_rule(counter):
    server = counter.CounterServer()
    assert check_counter(server) == ALL_RULES
    assert server.session_state == {}
    assert len(server.episode_sessions) == 0 and len(server.episode_sessions.locks) == 0


def test_counter_refuses_invalid_task_data_with_its_own_422(counter):
    server = counter.CounterServer()
    invalid = {"episode_id": {"rollout_id": "r"}, "task_data": {"initial_count": "many"}}
    assert "invalid seed 422" in check_counter(server, invalid_seed=invalid)


def test_calculator_passes_the_stateless_rules(calculator):
    rules = check_resources_session_contract(calculator.CalculatorServer(), {"task_data": {}}, keeps_state=False)
    assert rules == ALL_RULES[:6]


def test_blackjack_passes_the_rules_without_verify():
    server = load_environment("blackjack").BlackjackEnv()
    rules = check_resources_session_contract(
        server, {"task_data": {"seed": 7}}, keeps_state=True, holds_state=lambda sid: sid in server.session_state
    )
    assert rules == [r for r in ALL_RULES if r != "verify after close masked"]
    assert server.session_state == {}


# -- deliberately broken servers -------------------------------------------------------------------


def test_a_server_that_leaks_state_after_close_breaks_close(counter):
    class Leaky(counter.CounterServer):
        """Keeps a dict of its own besides session_state (which the base drops), and no close releases it."""

        _kept: dict = PrivateAttr(default_factory=dict)

        async def seed_session(self, request: counter.Request, body: counter.ResourcesSeedSessionRequest):
            self._kept[request.session[counter.SESSION_ID_KEY]] = True
            return await super().seed_session(request, body)

    server = Leaky()
    with pytest.raises(
        SessionContractError,
        match=r"rule 'close': holds_state\('contract-close-\w+'\) is still "
        r"true after its close; the server leaks",
    ) as err:
        check_counter(server, holds_state=lambda sid: sid in server._kept)
    assert err.value.rule == "close"
    assert isinstance(err.value, AssertionError)


def test_a_server_that_accepts_a_seed_after_close_breaks_the_fence_rule(counter):
    unfenced = counter.CounterServer(session_close_retry_window_seconds=0)
    with pytest.raises(
        SessionContractError,
        match=r"rule 'seed after close refused while fenced': a seed of "
        r"'contract-seed-\w+' after its close must be refused with 409, "
        r"got HTTP 200",
    ) as err:
        check_counter(unfenced)
    assert err.value.rule == "seed after close refused while fenced"


def test_a_server_that_answers_a_lost_session_verify_with_500_breaks_the_verify_rule(counter):
    class Crashy(counter.CounterServer):
        async def verify(self, request: counter.Request, body: counter.CounterVerifyRequest):
            state = self.session_state.pop(request.session[counter.SESSION_ID_KEY])  # KeyError once closed
            return counter.CounterVerifyResponse(**body.model_dump(), reward=1.0, final_count=state["count"])

    with pytest.raises(
        SessionContractError,
        match=r"rule 'verify after close masked': a verify after the close: "
        r"expected HTTP 200, got HTTP 500 .*KeyError",
    ) as err:
        check_counter(Crashy())
    assert err.value.rule == "verify after close masked"


def test_a_server_that_never_grades_a_held_session_breaks_released_once(counter):
    class AlwaysLost(counter.CounterServer):
        async def verify(self, request: counter.Request, body: counter.CounterVerifyRequest):
            self.session_state.pop(request.session[counter.SESSION_ID_KEY], None)
            return counter.lost_session_verification(body, reason="dropped too early")

    with pytest.raises(
        SessionContractError,
        match=r"rule 'state released exactly once': the verify before the "
        r"close came back masked \(session_lost: dropped too early\)",
    ):
        check_counter(AlwaysLost())


def test_a_server_that_keeps_a_refused_seed_breaks_invalid_seed(counter):
    class Sloppy(counter.CounterServer):
        async def seed_session(self, request: counter.Request, body: counter.ResourcesSeedSessionRequest):
            self.session_state[body.resources_session_id] = {"count": 0}
            return await super().seed_session(request, body)

    invalid = {"episode_id": {"rollout_id": "r"}, "task_data": {"initial_count": "many"}}
    with pytest.raises(
        SessionContractError,
        match=r"rule 'invalid seed 422': holds_state\(.*\) is still true "
        r"after a refused seed",
    ):
        check_counter(Sloppy(), invalid_seed=invalid)


def test_keeps_state_needs_holds_state(counter):
    with pytest.raises(TypeError, match="keeps_state=True needs holds_state"):
        check_resources_session_contract(counter.CounterServer(), COUNTER_SEED)
