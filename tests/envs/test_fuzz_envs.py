"""The adapters' servers fuzzed from their OpenAPI schemas: no input, valid or not, gets a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from gymlab import envs

pytest.importorskip("reasoning_gym")
pytest.importorskip("textarena")

SERVERS = {
    "reasoning_gym": lambda: envs.reasoning_gym("chain_sum", size=2)[0],
    "textarena": lambda: envs.textarena("TicTacToe-v0", num_players=2, opponent=lambda text: "[4]")[0],
    "gymnasium": lambda: envs.gymnasium("FrozenLake-v1")[0],
}


@pytest.mark.parametrize("name", SERVERS)
def test_no_input_gets_a_server_error(lab, name):
    url = lab.serve(SERVERS[name]()).url
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    errors: list[str] = []
    for operation in [result.ok() for result in schema.get_all_operations()]:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=15,
                derandomize=True,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate],
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case):
                response = case.call(base_url=url, timeout=60)
                if response.status_code >= 500:
                    errors.append(f"{case.method} {case.path} body={case.body!r:.300} -> {response.text[:300]}")  # noqa: B023

            try:
                fuzz()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE
    assert not errors, f"{name}: {len(errors)} server errors:\n" + "\n".join(errors[:10])
