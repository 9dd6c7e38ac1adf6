"""A config's servers served for one collection without a Lab (``gymlab/collection/serving.py``): every
exit path stops the servers it started, once: a server that cannot start, a collection cancelled midway."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import gymlab
from gymlab._http.client import Client
from gymlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = ROOT / "environments" / "calculator"

APP = """
import asyncio

from gymlab import BaseServer


class Broken(BaseServer):
    def setup_webserver(self):
        raise RuntimeError("this server cannot start")


async def endless(request):
    await asyncio.Event().wait()  # a model that never answers
"""


def _config(tmp_path: Path, agent: str, policy: str) -> Path:
    (tmp_path / "app.py").write_text(APP)
    path = tmp_path / "config.yaml"
    path.write_text(f"""
calculator:
  resources_servers:
    calculator:
      entrypoint: {CALCULATOR / "app.py"}
policy_model:
  responses_api_models:
    policy_model:
      policy: {policy}
{agent}
""")
    return path


AGENT = """calculator_simple_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: calculator}
      model_server: {type: responses_api_models, name: policy_model}
      datasets:
      - name: example
        type: example
        jsonl_fpath: %s
""" % (CALCULATOR / "data" / "example.jsonl")


def _refused(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        return s.connect_ex((parts.hostname, parts.port)) != 0


def test_a_server_that_cannot_start_stops_those_already_started(tmp_path):
    broken = "broken:\n  responses_api_agents:\n    broken:\n      entrypoint: app.py:Broken\n"
    config = _config(tmp_path, broken, f"{CALCULATOR / 'app.py'}:policy")
    client = Client()  # the caller's: the collection's servers register in its registry
    with pytest.raises(Exception, match="this server cannot start"):
        gymlab.collect(config, tmp_path / "run.jsonl", input=[], progress=False, client=client)
    assert not client.registry._apps  # the model and the calculator, started first, are gone


async def test_a_collection_cancelled_midway_stops_its_servers(tmp_path):
    config = _config(tmp_path, AGENT, "app.py:endless")
    client = Client()  # the caller's: the collection's servers register in its registry
    run = gymlab.acollect(config, tmp_path / "run.jsonl", max_retries=0, progress=False, client=client)
    task = asyncio.ensure_future(run)
    async with asyncio.timeout(60):
        while len(client.registry._apps) < 3 or not (tmp_path / "run_materialized_inputs.jsonl").exists():
            await asyncio.sleep(0.02)  # polls a condition: the three servers up and the rows sent
    served = set(client.registry._apps)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not client.registry._apps
    await client.close()
    assert all(_refused(url) for url in served)  # their sockets closed too, not only unregistered
    assert (tmp_path / "run.jsonl").read_text() == ""  # no episode finished: nothing recorded, nothing guessed


def test_rows_without_a_target_are_refused_with_what_to_give(tmp_path):
    with pytest.raises(ConfigError, match=r"give rows and agent_url= .* or route= .*, or a config"):
        gymlab.collect([{"responses_create_params": {"input": "hi"}}], tmp_path / "run.jsonl", progress=False)
    assert not (tmp_path / "run.jsonl").exists()


def test_gymlab_collect_never_reaches_the_notebook_layer():
    """``gymlab collect`` serves a config without a ``Lab``: no import from ``gymlab/cli/collect.py`` on
    (lazy ones too) reaches ``gymlab.lab``, nor does the config serving."""
    from tests.test_layers import import_graph

    graph = import_graph()
    seen, todo = set(), ["gymlab.cli.collect", "gymlab.collection.serving"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    assert "gymlab.run.engine" in seen and not {m for m in seen if m.startswith("gymlab.lab")}
