"""NeMo Gym writes a graded record's ``failure_kind`` and ``failure_reason`` as null; every writer of
records keeps them so (``record_json``): the agent's answer, a JSONL file, a run saved from memory."""

from __future__ import annotations

import json

import gymlab
from benchmarks.records import synthetic
from gymlab.jsonl import json_line, write_jsonl_atomic
from gymlab.lab.runs import Rollouts
from gymlab.protocol.record import NULL_WRITTEN_KEYS, record_json


def _nulls(line: str) -> dict:
    data = json.loads(line)
    return {key: data[key] for key in NULL_WRITTEN_KEYS if key in data}


def test_every_writer_keeps_the_reserved_keys_null_and_leaves_unset_extras_out(tmp_path):
    record = synthetic(1, 2)[0]
    expected = dict.fromkeys(NULL_WRITTEN_KEYS)
    assert _nulls(record_json(record)) == _nulls(json_line(record)) == expected
    assert "failure_stage" not in json.loads(json_line(record))  # a field gymlab added: out while unset
    written = write_jsonl_atomic(tmp_path / "a.jsonl", [record])
    assert _nulls(written.read_text().splitlines()[0]) == expected
    saved = Rollouts([record]).save(tmp_path / "b.jsonl")
    assert _nulls(saved.read_text().splitlines()[0]) == expected
    assert gymlab.load(saved).store.record(0) == record  # and they read back as the same record
