"""The files ``gymlab init`` writes, as ``string.Template`` text (``$name``, ``$cls``, ``$agent``)."""

from __future__ import annotations

#: The example rows' texts; the model is asked for the word count of the quoted text. Their counts
#: differ (4, 6, 2, 7): rows that share an answer pay a constant ("6" paid half of them once).
SENTENCES = ["the quick brown fox", "to be or not to be", "hello world", "one small step for every new environment"]

TOOL = {
    "type": "function",
    "name": "count_words",
    "description": "Count the words of a text.",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    "strict": True,
}

POLICY = '''

def policy(request):
    """Rule-based model: count the quoted text's words with the tool, then report the count."""
    items = request.input_items()
    last = items[-1] if items else None
    if last is not None and last.type == "function_call_output":
        return f"The text has {json.loads(last.output).get('count')} words."
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    if text.count('"') >= 2 and any(t.name == "count_words" for t in request.tools):
        return [function_call("count_words", {"text": text.split('"')[1]})]
    return "I cannot help with that."
'''

SIMPLE_APP = (
    '''"""$name: one tool, ``/count_words``; reward 1.0 when the model used it and answered the row's ``expected_count``.

Serve it with its agent and a rule-based model: ``gymlab serve configs/$name.yaml``.
"""

from __future__ import annotations

import json
import re

from fastapi import FastAPI, Request
from gymlab import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
    function_call,
    lost_session_verification,
)
from pydantic import BaseModel


class CountWordsRequest(BaseModel):
    text: str


class CountWordsResponse(BaseModel):
    count: int


class ${cls}VerifyRequest(BaseVerifyRequest):
    expected_count: int  # a row field: declared here, so it reaches verify


class ${cls}Server(SimpleResourcesServer):
    """Per-episode state lives in self.session_state, keyed by the session; the base drops an episode's
    entry after its verify, on a close (a failed or interrupted episode), and by the idle-session reaper."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/count_words")(self.count_words)  # a tool; rows declare it in responses_create_params.tools
        return app

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        self.session_state[request.session[SESSION_ID_KEY]] = {"tool_calls": 0}
        return BaseSeedSessionResponse()

    async def count_words(self, request: Request, body: CountWordsRequest) -> CountWordsResponse:
        state = self.session_state.get(request.session[SESSION_ID_KEY])
        if state is not None:
            state["tool_calls"] += 1
        return CountWordsResponse(count=len(body.text.split()))

    async def verify(self, request: Request, body: ${cls}VerifyRequest) -> BaseVerifyResponse:
        state = self.session_state.get(request.session[SESSION_ID_KEY])
        if state is None:
            return lost_session_verification(body)
        answered = re.findall(r"-?\\d+", body.response.output_text) == [str(body.expected_count)]
        return BaseVerifyResponse(responses_create_params=body.responses_create_params, response=body.response,
                                  reward=float(state["tool_calls"] > 0 and answered))
'''
    + POLICY
    + """

if __name__ == "__main__":
    ${cls}Server.run_webserver()
"""
)

GYMNASIUM_APP = (
    '''"""$name: a Gymnasium environment. Each step the model calls ``count_words`` (an observation comes
back) or answers; the answer ends the episode with reward 1.0 when its only number is the row's ``expected_count``.

Serve it with its agent and a rule-based model: ``gymlab serve configs/$name.yaml``.
"""

from __future__ import annotations

import json
import re

from gymlab import GymnasiumServer, function_call


class ${cls}Env(GymnasiumServer):
    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = {"expected_count": metadata.get("expected_count"), "tool_calls": 0}
        return None, {}

    async def step(self, action, metadata, session_id=None):
        state = self.session_state.get(session_id)
        if state is None:
            return None, 0.0, False, True, {
                "mask_sample": True,
                "failure_kind": "session_lost",
                "failure_reason": "no episode is held for this session; call /reset first",
            }
        calls = [item for item in action.output if item.type == "function_call"]
        if calls:
            outputs = []
            for call in calls:
                if call.name == "count_words":
                    state["tool_calls"] += 1
                    result = {"count": len(str(json.loads(call.arguments).get("text", "")).split())}
                else:
                    result = {"error": f"unknown tool {call.name!r}; call count_words"}
                outputs.append(self.tool_output(call, result))
            return None, 0.0, False, False, {"tool_outputs": outputs}
        numbers = re.findall(r"-?\\d+", action.output_text)
        correct = state["expected_count"] is not None and numbers == [str(state["expected_count"])]
        return None, float(correct), True, False, {"correct": correct, "tool_calls": state["tool_calls"]}
'''
    + POLICY
    + """

if __name__ == "__main__":
    ${cls}Env.run_webserver()
"""
)

CONFIG = """# Serve with `gymlab serve configs/$name.yaml`;
# collect with `gymlab collect configs/$name.yaml --output out.jsonl`. Paths are relative to this file.
$name:
  resources_servers:
    $name:
      entrypoint: ../app.py
      domain: other
${name}_$agent:
  responses_api_agents:
    $agent:
      resources_server:
        type: resources_servers
        name: $name
      model_server:
        type: responses_api_models
        name: policy_model
      datasets:
      - name: example
        type: example
        jsonl_fpath: ../data/example.jsonl
policy_model:
  responses_api_models:
    policy_model:
      policy: ../app.py:policy
"""

TEST = '''"""$name: every example row earns reward 1.0 through a Lab; the server keeps the session contract;
the config loads."""

import json
from pathlib import Path

from gymlab import Lab
from gymlab.cli import main
from gymlab.testing import check_resources_session_contract
from gymlab.utils import import_file

HERE = Path(__file__).resolve().parent
app = import_file(HERE / "app.py", "${name}_app")
ROWS = [json.loads(line) for line in (HERE / "data" / "example.jsonl").read_text().splitlines() if line.strip()]


def test_every_row_earns_reward_1():
    with Lab() as lab:
        env = lab.serve(app.$server)
        model = lab.serve_model(app.policy)
        agent = lab.serve_agent("$agent", resources=env, model=model)
        for row in ROWS:
            assert agent.run(row).reward == 1.0


def test_session_contract():
    # An episode's state lives in session_state from its seed until the episode ends.
    server = app.$server()
    rules = check_resources_session_contract(server, $seed, keeps_state=True, verify_body=$verify_body,
                                             holds_state=lambda sid: sid in server.session_state)
    assert "state released exactly once" in rules
    assert server.session_state == {}


def test_config_loads():
    assert main(["list", str(HERE / "configs" / "$name.yaml")]) == 0


if __name__ == "__main__":  # `python test_app.py`: the same tests, where pytest is not installed
    tests = [test for name, test in list(globals().items()) if name.startswith("test_") and callable(test)]
    for test in tests:
        test()
        print(f"passed: {test.__name__}")
    if not tests:
        raise SystemExit("test_app.py: no test ran (no function named test_...)")
    print(f"{len(tests)} passed")
'''

README = """# $name

A gymlab environment: `app.py` (the server and a rule-based `policy`), `data/example.jsonl` (rows),
`configs/$name.yaml` (server, $agent and policy model). `python test_app.py` (or `python -m pytest`,
where pytest is installed) runs one episode per row through a `Lab` and checks the episode-session
contract; `gymlab serve configs/$name.yaml` serves it.
"""
