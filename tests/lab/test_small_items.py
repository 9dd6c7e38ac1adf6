"""A researcher's small frictions: a second Lab, failure summaries, row fields checked before a run,
logs from a script, task labels of templated prompts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from gymlab import BaseVerifyResponse, ConfigError, Lab
from gymlab.examples import example_rows
from gymlab.lab.viewer import RunFilter
from gymlab.lab.widgets import LivePanel
from tests.resources.test_simple_state import ROWS, GuessServer, GuessVerify, bisect

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_lab_warns_naming_the_first_and_how_to_close_it(calculator):
    with Lab() as first:
        env = first.serve(calculator.CalculatorServer, name="calc_first")
        with pytest.warns(UserWarning) as caught:
            second = Lab()
        second.close()
        (message,) = [str(w.message) for w in caught]
        assert f"still serving: <Lab calc_first={env.url}>" in message and "lab.close()" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Lab().close()  # the first one is closed: nothing to warn about


class Broken(GuessServer):
    async def verify(self, body: GuessVerify) -> BaseVerifyResponse:
        if body.secret != 7:  # a grader's bug on two tasks of three
            raise KeyError("secret")
        return await super().verify(body)


def test_live_panel_ends_with_one_line_naming_the_most_common_cause(capfd):
    with Lab() as lab:
        env = lab.serve(Broken)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
        capfd.readouterr()
        run = LivePanel().run(agent, ROWS, repeats=3)
        printed = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        failed = sum(run.failures.values())
        assert failed == 6  # the task of 7 passes
        assert len(printed) == 1, printed  # not one line per failed episode
        assert f"{failed} of 9 episodes failed (verifier_error {failed})" in printed[0]
        assert f"the most common cause ({failed}): " in printed[0] and "KeyError: 'secret'" in printed[0]
        assert len(lab.logs(last=None)) >= failed  # every trace kept


def test_run_many_names_the_most_common_cause(capfd):
    with Lab() as lab:
        env = lab.serve(Broken)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
        capfd.readouterr()
        run = lab.run_many(agent, ROWS, repeats=2)
        (line,) = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        failed = sum(run.failures.values())
        assert f"the most common cause ({failed}): " in line and "KeyError: 'secret'" in line


def test_check_reports_a_typo_in_a_seed_field_before_any_episode_runs():
    typo = [{**{k: v for k, v in row.items() if k != "secret"}, "secrett": row["secret"]} for row in ROWS]
    with Lab() as lab:
        env = lab.serve(GuessServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
        report = lab.check(agent, typo)
        assert not report.ok
        assert (
            "/seed_session secret: Field required (the row has 'secrett': a typo?) in rows 0, 1, 2" in report.problems
        )
        assert "/verify secret: Field required (the row has 'secrett': a typo?) in rows 0, 1, 2" in report.problems
        with pytest.raises(ConfigError, match="secrett"):
            lab.run_many(agent, typo)
        assert lab.last_run is None  # refused before any episode ran
        assert lab.check(agent, ROWS).ok
        wrong_type = [{**ROWS[0], "secret": "forty-two"}]
        assert "secret: Input should be a valid integer" in str(lab.check(env, wrong_type))


def test_check_of_rows_without_required_fields_of_a_stateless_server(calculator):
    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer)
        assert lab.check(env, example_rows("calculator")).ok
        assert lab.check(env, [{"responses_create_params": {"input": "hi"}}]).ok  # nothing it requires


def test_lab_logs_work_in_a_script(tmp_path):
    script = tmp_path / "failing_run.py"
    script.write_text(
        textwrap.dedent(
            """
            from gymlab import Lab, BaseVerifyRequest, BaseVerifyResponse
            from gymlab.examples import example_rows, load_environment

            calc = load_environment("calculator")

            class Broken(calc.CalculatorServer):
                async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
                    return 1 / 0

            with Lab() as lab:
                env = lab.serve(Broken)
                agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calc.policy))
                lab.run_many(agent, example_rows("calculator")[:2])
                print("LOGS", len(lab.logs()))
                print(lab.logs())
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "LOGS 2" in done.stdout
    assert f'ZeroDivisionError: division by zero (File "{script}", line 9, in verify)' in done.stdout
    assert "Traceback (most recent call last)" in done.stdout


def test_the_run_browser_labels_templated_tasks_by_the_row_field_that_tells_them_apart():
    with Lab() as lab:
        env = lab.serve(GuessServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
        run = lab.run_many(agent, ROWS, repeats=2)
    labels = [label for label, _ in RunFilter(list(run)).task_options()[1:]]
    assert [label.split(" · ")[0] for label in labels] == [
        "task 0 (2): secret=7",
        "task 1 (2): secret=42",
        "task 2 (2): secret=99",
    ]
    distinct = example_rows("calculator")  # prompts that differ: each task is named by its prompt
    with Lab() as lab:
        from gymlab.examples import load_environment

        calc = load_environment("calculator")
        env = lab.serve(calc.CalculatorServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calc.policy))
        run = lab.run_many(agent, distinct)
    labels = [label for label, _ in RunFilter(list(run)).task_options()[1:]]
    assert all("=" not in label for label in labels) and len(set(labels)) == len(distinct)


@pytest.mark.parametrize("wire", [False, True], ids=["in-process", "wire"])
def test_an_episode_whose_verify_raised_keeps_its_steps(wire):
    with Lab(wire=wire) as lab:
        env = lab.serve(Broken)  # its verify raises on the tasks of 42 and 99
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
        run = lab.run_many(agent, ROWS)
    ok, *failed = list(run)
    assert not ok.mask_sample and len(ok.steps) > 1
    for record in failed:
        assert record.mask_sample and record.failure_kind == "verifier_error" and record.failure_stage == "verification"
        calls = [s for s in record.steps if s.action and s.action[0].type == "function_call"]
        assert len(calls) >= 5 and record.steps[-1].action[0].type == "message"  # every guess, then the answer
        assert [s.index for s in record.steps] == list(range(len(record.steps)))
    assert list(run.steps.groupby("episode").size()) == [len(r.steps) for r in run]  # the frame has them too
