"""Per-episode state is process state, not config: YAML (or keywords) cannot set ``session_state``."""

import pytest
from pydantic import ValidationError

from gymlab.examples import load_environment


def test_session_state_is_not_a_config_field():
    counter = load_environment("counter")
    blackjack = load_environment("blackjack")
    for cls in (counter.CounterServer, blackjack.BlackjackEnv):
        assert "session_state" not in cls.model_fields
        with pytest.raises(ValidationError, match="session_state"):
            cls(session_state={"x": {"count": 99}})
        server = cls()
        assert server.session_state == {} and server.session_state is server.session_state
        assert "session_state" not in server.model_dump()
