"""The record of a verified episode: what the verify echoes unchanged is the model the agent already
validated; what it changed is validated from the answer, so the record holds the environment's word."""

from __future__ import annotations

from gymlab.protocol import NeMoGymResponse, ResponseCreateParams, assistant_message
from gymlab.protocol import record as records


def _sent():
    params = ResponseCreateParams.model_validate({"input": "What is 3 squared?"})
    response = NeMoGymResponse(output=[assistant_message("9")])
    row = {"responses_create_params": params.model_dump(mode="json", exclude_none=True), "expected": 9}
    verify = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
    sent = {
        "response": (verify["response"], response),
        "responses_create_params": (row["responses_create_params"], params),
    }
    return row, verify, sent, response, params


def test_an_unchanged_echo_reuses_the_validated_models():
    row, verify, sent, response, params = _sent()
    record = records.verified({**verify, "reward": 1.0}, [], "final_message", 0.5, row=row, sent=sent)
    assert record.response is response and record.responses_create_params is params
    plain = records.verified({**verify, "reward": 1.0}, [], "final_message", 0.5, row=row)
    assert record.model_dump_json(exclude_none=True) == plain.model_dump_json(exclude_none=True)


def test_a_changed_echo_is_validated_from_the_answer():
    row, verify, sent, response, _ = _sent()
    changed = {**verify["response"], "output": [assistant_message("nine").model_dump(mode="json", exclude_none=True)]}
    record = records.verified(
        {**verify, "response": changed, "reward": 0.0}, [], "final_message", 0.5, row=row, sent=sent
    )
    assert record.response is not response and record.response.output[0].text == "nine"
    assert record.reward == 0.0


def test_an_echo_that_spells_out_nulls_is_unchanged():
    row, verify, sent, response, params = _sent()
    echo = {**verify, "response": {**verify["response"], "incomplete_details": None}, "reward": 1.0}
    echo["responses_create_params"] = {**verify["responses_create_params"], "instructions": None}
    record = records.verified(echo, [], "final_message", 0.5, row=row, sent=sent)
    assert record.response is response and record.responses_create_params is params
    plain = records.verified(echo, [], "final_message", 0.5, row=row)
    assert record.model_dump_json(exclude_none=True) == plain.model_dump_json(exclude_none=True)


def test_an_echo_that_drops_a_key_or_fills_a_null_is_changed():
    row, verify, sent, response, params = _sent()
    dropped = {k: v for k, v in verify["response"].items() if k != "status"}
    record = records.verified(
        {**verify, "response": dropped, "reward": 1.0}, [], "final_message", 0.5, row=row, sent=sent
    )
    assert record.response is not response
    filled = {**verify["responses_create_params"], "instructions": "be brief"}
    record = records.verified(
        {**verify, "responses_create_params": filled, "reward": 1.0}, [], "final_message", 0.5, row=row, sent=sent
    )
    assert record.responses_create_params is not params and record.responses_create_params.instructions == "be brief"
