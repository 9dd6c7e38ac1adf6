"""hf_model: a transformers causal LM answering /v1/responses on a real uvicorn server, driven by the official
``openai`` client and by gymlab's agents; batching, token ids and logprobs, budgets and hostile requests.

The models are built here (``gymlab.train.tiny``): random-init, or fitted for a few dozen steps on one
answer (a tool call; an endless ``<tool_call>`` repetition). Generation runs on one torch thread
(``threads=1``), as a shared CPU wants.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading

import httpx
import openai
import pytest
import torch

from gymlab import DatasetError, Lab, export_dataset, export_rl, export_rollouts, read_dataset, read_jsonl
from gymlab.models.hf import HFModel, prompt_ids
from gymlab.protocol import ResponseCreateParams
from gymlab.protocol.responses import TOKEN_FIELDS
from gymlab.testing.workers import wait_until
from gymlab.train.tiny import tiny_chat_model

GUESS = {
    "type": "function",
    "name": "guess",
    "description": "Guess a number.",
    "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
}
CALL_TEXT = '<tool_call>\n{"name": "guess", "arguments": {"number": 7}}\n</tool_call>'
FAST = {"threads": 1, "batch_window_ms": 5}


def fit(body: dict, answer: str, *, end: bool = True, steps: int = 60, seed: int = 0):
    """A tiny model fitted to answer ``body`` (as the server renders it) with ``answer``."""
    model, tok = tiny_chat_model(seed=seed)
    prompt, _ = prompt_ids(tok, ResponseCreateParams.model_validate(body))
    target = tok(answer, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if end else [])
    ids = torch.tensor([prompt + target])
    labels = torch.tensor([[-100] * len(prompt) + target])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(steps):
            model(input_ids=ids, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
        model.eval()
    return model, tok


@pytest.fixture(scope="module")
def tiny():
    return tiny_chat_model(seed=0)


@pytest.fixture(scope="module")
def caller():
    """A model fitted to call ``guess`` with 7 when asked to guess."""
    return fit({"input": "Guess the number.", "tools": [GUESS]}, CALL_TEXT)


@pytest.fixture(scope="module")
def endless():
    """A degenerate model: it repeats ``<tool_call>`` and never ends its turn."""
    return fit({"input": "Go.", "tools": [GUESS]}, "<tool_call>" * 48, end=False)


def _serve(lab: Lab, pair, **config):
    model, tok = pair
    return lab.serve_model(hf=model, tokenizer=tok, **{**FAST, **config})


def test_the_openai_client_reads_text_and_a_parsed_tool_call(lab, caller):
    handle = _serve(lab, caller, max_output_tokens=48)
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)

    text = client.responses.create(model="tiny", input="Say something.", max_output_tokens=6, temperature=0)
    item = text.output[0].model_dump()
    assert text.usage.output_tokens == len(item["generation_token_ids"]) <= 6
    assert text.usage.input_tokens == len(item["prompt_token_ids"]) > 0
    assert len(item["generation_log_probs"]) == len(item["generation_token_ids"])
    assert all(lp <= 0 for lp in item["generation_log_probs"])

    called = client.responses.create(model="tiny", input="Guess the number.", tools=[GUESS], temperature=0)
    calls = [i for i in called.output if i.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("guess", {"number": 7})]
    assert called.status == "completed" and called.output[0].model_dump()["generation_token_ids"]

    with client.responses.stream(model="tiny", input="Guess the number.", tools=[GUESS], temperature=0) as stream:
        final = stream.get_final_response()
    assert [(i.name, i.arguments) for i in final.output if i.type == "function_call"] == [
        (c.name, c.arguments) for c in calls
    ]


def test_logprobs_are_the_raw_model_distribution_whatever_the_sampling(lab, tiny):
    """Sampled at temperature 0.7 and top_p 0.9, each logprob is the unwarped model's, as a plain forward
    pass over prompt + answer gives it (so padding in a batch changes nothing either)."""
    model, tok = tiny
    handle = _serve(lab, tiny, batch_window_ms=300)
    client = openai.AsyncOpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)

    async def ask(text):
        return await client.responses.create(model="tiny", input=text, temperature=0.7, top_p=0.9, max_output_tokens=12)

    async def both():
        return await asyncio.gather(ask("hi"), ask("a much longer prompt than the other one, padded left"))

    for answer in asyncio.run(both()):
        item = answer.output[0].model_dump()
        prompt, generated = item["prompt_token_ids"], item["generation_token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generated])).logits[0].float()
        expected = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(1, torch.tensor(generated)[:, None])
        assert torch.allclose(expected.squeeze(1), torch.tensor(item["generation_log_probs"]), atol=1e-4)


def test_eight_concurrent_requests_are_generated_in_at_most_two_batches(lab, tiny):
    handle = _serve(lab, tiny, batch_window_ms=500, max_batch=8)
    client = openai.AsyncOpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)

    async def eight():
        return await asyncio.gather(
            *(client.responses.create(model="tiny", input=f"hello {i}", max_output_tokens=8) for i in range(8))
        )

    answers = asyncio.run(eight())
    assert len({a.id for a in answers}) == 8
    assert handle.server.batches <= 2 and sum(handle.server._batcher.batch_sizes) == 8


def test_fifty_concurrent_requests_are_all_answered_in_batches(lab, tiny):
    handle = _serve(lab, tiny, max_batch=16)

    async def fifty():
        async with httpx.AsyncClient(base_url=handle.url, timeout=120) as http:
            return await asyncio.gather(
                *(
                    http.post("/v1/responses", json={"input": f"n {i}", "max_output_tokens": 3, "temperature": 0})
                    for i in range(50)
                )
            )

    answers = asyncio.run(fifty())
    assert [a.status_code for a in answers] == [200] * 50
    assert all(len(a.json()["output"][0]["generation_token_ids"]) <= 3 for a in answers)
    batcher = handle.server._batcher
    assert handle.server.batches < 50
    wait_until(lambda: batcher.in_flight == 0 and batcher.arriving == 0, what="no request in flight or arriving")


def test_past_max_queue_a_request_is_a_429_with_a_failure_kind(lab, endless):
    handle = _serve(lab, endless, max_batch=1, max_queue=2, batch_window_ms=0)

    async def six():
        async with httpx.AsyncClient(base_url=handle.url, timeout=120) as http:
            body = {"input": "Go.", "temperature": 0, "max_output_tokens": 120}  # the queue fills meanwhile
            return await asyncio.gather(*(http.post("/v1/responses", json=body) for _ in range(6)))

    answers = asyncio.run(six())
    refused = [a for a in answers if a.status_code == 429]
    assert {a.status_code for a in answers} == {200, 429} and len(refused) >= 3
    assert all(a.json()["failure"]["kind"] == "provider_quota_exhausted" for a in refused)
    assert "max_queue" in refused[0].json()["detail"]
    assert all(a.json()["output"][0]["generation_token_ids"] for a in answers if a.status_code == 200)


def test_bad_budgets_and_sampling_are_4xx_and_a_huge_budget_is_clamped(lab, tiny):
    handle = _serve(lab, tiny, max_output_tokens=5, context_length=128)
    with httpx.Client(base_url=handle.url, timeout=60) as http:
        for bad, word in (
            ({"max_output_tokens": -1}, "max_output_tokens"),
            ({"max_output_tokens": 0}, "max_output_tokens"),
            ({"temperature": 5}, "temperature"),
            ({"temperature": -0.5}, "temperature"),
            ({"top_p": 0}, "top_p"),
        ):
            answer = http.post("/v1/responses", json={"input": "hi", **bad})
            assert answer.status_code == 400, answer.text
            assert "hf_model: POST /v1/responses:" in answer.json()["detail"] and word in answer.json()["detail"]
        assert http.post("/v1/responses", json={"input": "hi", "max_output_tokens": "lots"}).status_code == 422
        # past 64 bits the wire type refuses it (422, the field named); within them it is clamped
        past = http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 10**30})
        assert past.status_code == 422 and "max_output_tokens" in past.text

        huge = http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 10**15, "temperature": 0})
        assert huge.status_code == 200, huge.text
        assert huge.json()["usage"]["output_tokens"] == 5  # the server's limit
        assert huge.json()["status"] == "incomplete"
        assert huge.json()["incomplete_details"] == {"reason": "max_output_tokens"}

        long = http.post("/v1/responses", json={"input": "word " * 400})
        assert long.status_code == 400
        assert "context is 128 tokens" in long.json()["detail"]
    # every refused request stops counting as arriving (its middleware ends just after the answer is sent)
    wait_until(lambda: handle.server._batcher.arriving == 0, what="no request counted as arriving")


@pytest.mark.parametrize(
    "given",
    [
        [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}],
        [{"type": "mcp_call", "name": "x"}],
        "",
    ],
    ids=["image", "foreign_item", "empty"],
)
def test_a_request_the_template_cannot_render_is_a_400_saying_what_it_takes(lab, tiny, given):
    handle = _serve(lab, tiny, max_output_tokens=2)
    answer = httpx.post(handle.url + "/v1/responses", json={"input": given}, timeout=60)
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith("hf_model: POST /v1/responses: ") and "\n" not in detail
    assert "text content" in detail + answer.json().get("hint", "") or "empty" in detail


def test_a_degenerate_generation_is_returned_as_text_with_no_call(lab, endless):
    handle = _serve(lab, endless, max_output_tokens=40)
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)
    answer = client.responses.create(model="tiny", input="Go.", tools=[GUESS], temperature=0)
    assert answer.status == "incomplete"
    assert [i.type for i in answer.output] == ["message"]
    assert answer.output_text.count("<tool_call>") == 40


def test_a_custom_tool_parser_reads_the_calls(lab, caller):
    seen = []

    def parser(text):
        seen.append(text)
        return "", [("guess", {"number": 8})]

    handle = _serve(lab, caller, tool_parser=parser)
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)
    answer = client.responses.create(model="tiny", input="Guess the number.", tools=[GUESS], temperature=0)
    assert [(i.name, json.loads(i.arguments)) for i in answer.output] == [("guess", {"number": 8})]
    assert seen == [CALL_TEXT]


def test_a_client_hanging_up_mid_generation_frees_its_row_and_the_batch_goes_on(lab, endless):
    handle = _serve(lab, endless, batch_window_ms=300, max_output_tokens=1500, timeout_s=300)
    batcher = handle.server._batcher

    async def scenario():
        async with httpx.AsyncClient(base_url=handle.url, timeout=300) as http:
            body = {"input": "Go.", "temperature": 0}
            long = asyncio.ensure_future(http.post("/v1/responses", json=body))
            short = await http.post("/v1/responses", json={**body, "max_output_tokens": 4})
            assert not long.done()  # the long row is still generating in the same batch
            long.cancel()  # the client hangs up
            return short

    short = asyncio.run(scenario())
    assert short.status_code == 200 and short.json()["usage"]["output_tokens"] == 4
    wait_until(lambda: batcher.finished["cancelled"] == 1 and batcher.in_flight == 0, 60, "the hung-up row dropped")
    assert batcher.batches == 1 and batcher.finished["length"] == 1
    again = httpx.post(handle.url + "/v1/responses", json={"input": "Go.", "max_output_tokens": 2}, timeout=60)
    assert again.status_code == 200


def test_the_budget_exceeded_is_a_504_with_a_failure_kind_and_a_masked_record(lab, endless, calculator):
    handle = _serve(lab, endless, max_output_tokens=1500, timeout_s=0.5)
    answer = httpx.post(handle.url + "/v1/responses", json={"input": "Go.", "temperature": 0}, timeout=60)
    assert answer.status_code == 504
    body = answer.json()
    assert body["failure"]["kind"] == "transport_timeout" and "timeout_s=0.5" in body["detail"]
    assert handle.server._batcher.finished["timeout"] == 1

    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent(resources=env, model=handle)
    row = {"responses_create_params": {"input": "Go.", "tools": [GUESS], "temperature": 0}}
    [record] = lab.run_many(agent, [row], check=False)
    assert record.mask_sample is True and record.failure_kind == "transport_timeout"


def test_every_record_of_a_run_carries_token_ids_and_logprobs_into_the_exports(lab, tiny, calculator, rows, tmp_path):
    env = lab.serve(calculator.CalculatorServer)
    model = _serve(lab, tiny, max_output_tokens=6, batch_window_ms=200)
    agent = lab.serve_agent(resources=env, model=model)
    records = lab.run_many(agent, rows("calculator"), repeats=2, concurrency=16)
    assert len(records) >= 4 and not any(r.mask_sample for r in records)
    assert model.server.batches < len(records)  # the run's model calls were generated together, not one by one
    for record in records:
        turns = [i.model_dump() for i in record.response.output if getattr(i, "generation_token_ids", None)]
        assert turns, record.response.output
        for item in turns:
            assert all(item[key] is not None for key in TOKEN_FIELDS)
            assert len(item["generation_log_probs"]) == len(item["generation_token_ids"]) > 0

    rollouts = read_jsonl(export_rollouts(records, tmp_path / "r.jsonl"), "rollout")
    assert all(r.response.output[0].model_dump()["generation_token_ids"] for r in rollouts)
    rl = read_jsonl(export_rl(records, tmp_path / "rl.jsonl"), "rl")
    assert len(rl) == len(records)
    turns = []
    for row, record in zip(rl, records):
        first = record.response.output[0].model_dump()
        turns.append([{key: first[key] for key in TOKEN_FIELDS}])
        assert row["token_turns"] == turns[-1]
    for fmt in ("trl-sft", "trl-kto"):  # the trainer formats of one row per episode carry them too
        for suffix in (".jsonl", ".parquet"):
            written = export_dataset(records, tmp_path / f"{fmt}{suffix}", fmt)
            back = read_dataset(written.path, fmt)
            assert [row["token_turns"] for row in back] == turns, (fmt, suffix)


def test_a_missing_train_extra_names_its_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # what a venv without the extra sees
    with pytest.raises(ImportError, match=r"pip install 'gymlab\[train\]'"):
        HFModel(hf="anything").setup_webserver()


def test_closing_the_lab_mid_generation_stops_it_and_frees_the_worker_thread(tiny):
    """Greedy, the random model repeats one token for ever: only the close can end this generation."""
    lab = Lab()
    handle = lab.serve_model(hf=tiny[0], tokenizer=tiny[1], max_output_tokens=1800, timeout_s=600)
    batcher = handle.server._batcher
    answers = []
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(handle.url + "/v1/responses", json={"input": "hello", "temperature": 0}, timeout=120)
        )
    )
    asking.start()
    wait_until(lambda: batcher.batches == 1 and batcher.in_flight == 1, 60, "the generation running")
    assert httpx.get(handle.url + "/health", timeout=60).status_code == 200  # answered while it generates
    lab.close()
    asking.join(60)
    assert [a.status_code for a in answers] == [503]
    assert answers[0].json()["failure"]["kind"] == "shutdown"
    assert batcher.finished["cancelled"] == 1 and batcher.join(30)


def test_gymlab_serve_runs_hf_model_from_a_yaml_path_and_sigterm_ends_a_generation_in_flight(tiny, tmp_path):
    """Greedy, the random model repeats one token for ever: only the SIGTERM can end the long answer."""
    from tests.cli.test_cli import serving

    model, tok = tiny
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    config = tmp_path / "hf.yaml"
    config.write_text(
        f"tiny_model:\n  responses_api_models:\n    hf_model:\n      hf: {tmp_path / 'tiny'}\n"
        "      max_output_tokens: 1800\n      timeout_s: 600\n      batch_window_ms: 300\n"
    )

    async def scenario(url):
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            body = {"input": "hello", "temperature": 0}
            long = asyncio.ensure_future(http.post("/v1/responses", json=body))
            short = await http.post("/v1/responses", json={**body, "max_output_tokens": 4})
            assert not long.done()  # generating in the same batch
            proc.send_signal(signal.SIGTERM)
            return short, await long

    with serving(config, 1) as (proc, urls, lines):
        short, long = asyncio.run(scenario(urls["tiny_model"]))
        assert short.status_code == 200, short.text
        item = short.json()["output"][0]
        assert item["prompt_token_ids"] == tok.apply_chat_template(
            [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert len(item["generation_token_ids"]) == len(item["generation_log_probs"]) == 4
        assert long.status_code == 503 and long.json()["failure"]["kind"] == "shutdown"
        assert proc.wait(120) == 0
    with pytest.raises(ProcessLookupError):  # nothing of the process group is left: its servers exited too
        os.killpg(proc.pid, 0)


def test_a_trainer_row_whose_token_turns_do_not_line_up_is_refused(tmp_path):
    row = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "tools": "[]",
        "token_turns": [{"prompt_token_ids": [1], "generation_token_ids": [5, 6], "generation_log_probs": [-0.1]}],
    }
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=r"sft.jsonl:1: not a trl-sft row: token_turns\[0\] needs"):
        read_dataset(path, "trl-sft")
