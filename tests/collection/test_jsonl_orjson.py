"""The JSONL helpers on orjson: one write per record, torn appends cut off, errors that give the line."""

import datetime
import json
from pathlib import Path

import pytest

from gymlab import DatasetError
from gymlab.jsonl import LineWriter, iter_jsonl, loads, read_appendable, read_lines, write_jsonl_atomic


def test_the_writer_appends_one_whole_line_per_record(tmp_path):
    path = tmp_path / "out.jsonl"
    writer = LineWriter(path)
    try:
        writer.write({"text": "naïve ✓", "n": 1})
        writer.write({1: "int key", "when": datetime.date(2026, 1, 2), "nested": {"a": [1.5, None]}})
        writer.write({"big": 2**70 + 1})  # past orjson's 64 bits: written exactly, by the standard library
    finally:
        writer.close()
    data = path.read_bytes()
    assert data.count(b"\n") == 3 and data.endswith(b"\n")
    assert "naïve ✓".encode() in data  # UTF-8 as written, not \\u escapes
    first, second, third = (json.loads(line) for line in data.splitlines())
    assert first == {"text": "naïve ✓", "n": 1}
    assert second == {"1": "int key", "when": "2026-01-02", "nested": {"a": [1.5, None]}}
    assert third == {"big": 2**70 + 1}
    assert [record for _, record in iter_jsonl(path)][2] == {"big": 2**70 + 1}  # and read back exactly
    assert read_appendable(path)[2] == {"big": 2**70 + 1}


def test_a_torn_append_is_cut_off_and_a_bad_complete_line_named(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')
    assert read_appendable(path) == [{"a": 1}, {"a": 2}]
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'  # the partial line is gone; its rollout runs again
    assert "removed a partial last line" in capsys.readouterr().err
    path.write_bytes(b'{"a": 1}\n{"a": 2}')  # a whole last record missing only its newline
    assert read_appendable(path) == [{"a": 1}, {"a": 2}] and path.read_bytes().endswith(b"}\n")
    path.write_bytes(b'{"a": 1}\n{oops\n{"a": 3}\n')
    with pytest.raises(DatasetError, match=r"run\.jsonl:2: damaged rollouts line"):
        read_appendable(path)


def test_reader_errors_give_the_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\n[1]\n')
    with pytest.raises(DatasetError, match=r"rows\.jsonl:3: a row is a JSON object, not list"):
        list(iter_jsonl(path))
    path.write_bytes(b'{"a": 1}\n{"t": "\xff"}\n')
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: not valid JSON"):
        list(iter_jsonl(path))
    path.write_bytes(b'{"a": 1}\n{"a": 2')
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: torn last line"):
        list(iter_jsonl(path))


def test_read_lines_keeps_records_unparsed_with_their_numbers(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n\n  \n{"a": 2}\n{"a": 3}')
    data, starts, numbers = read_lines(path)
    assert numbers == [1, 4, 5]
    assert [json.loads(data[a:b]) for a, b in zip(starts, [*starts[1:], len(data)])] == [{"a": i} for i in (1, 2, 3)]
    path.write_bytes(b'{"a": 1}\n{"a": ')
    with pytest.raises(DatasetError, match=r"r\.jsonl:2: torn last line"):
        read_lines(path)


def test_the_atomic_writer_writes_models_and_dicts(tmp_path):
    from benchmarks.records import synthetic

    record = synthetic(1, 1)[0]
    path = write_jsonl_atomic(tmp_path / "a.jsonl", [record, {"x": "ü"}])
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["reward"] == 1.0 and json.loads(lines[1]) == {"x": "ü"}
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 12345678901234567890}',  # an integer past orjson's 64 bits, alone
        "[-99999999999999999999, 0.1]",
        "[0.00012345678901234567, 123, 99999999999999999999]",  # a long fraction beside a long integer
        '{"duration_s": 0.0012345678901234567}',  # a long fraction only: orjson's way, the same floats
        "[12345678901234567890.5, 1234567890123456789012e3, 1.5e0000000000000000000001]",  # long mantissas
        '["12345678901234567890", "x1234567890123456789012"]',  # digits in strings
        "[" + ", ".join(["0.1234567890123456789"] * 200) + ", 2]",  # many fraction runs
    ],
)
def test_loads_reads_numbers_as_the_standard_library_does(text):
    got, want = loads(text), json.loads(text)
    assert got == want and repr(got) == repr(want)  # ints stay ints, floats the same floats
