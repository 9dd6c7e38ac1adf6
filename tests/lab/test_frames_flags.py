"""The episodes frame reads a record's own ``terminated``/``truncated``; the last step's are a fallback."""

from gymlab.lab.runs import Rollouts


def _record(**fields):
    return {"responses_create_params": {"input": "x"}, "response": {"output": []}, "reward": 1.0, **fields}


def test_a_step_less_record_keeps_its_own_flags():
    frame = Rollouts(
        [_record(terminated=True, truncated=False), _record(terminated=False, truncated=True), _record()]
    ).episodes_frame(full=True)
    assert frame["terminated"].tolist() == [True, False, False]
    assert frame["truncated"].tolist() == [False, True, False]
    assert frame["n_steps"].tolist() == [0, 0, 0]


def test_the_record_wins_over_its_last_step_and_the_step_is_the_fallback():
    step = {"index": 0, "terminated": True, "truncated": False}
    frame = Rollouts([_record(terminated=False, truncated=True, steps=[step]), _record(steps=[step])]).episodes_frame(
        full=True
    )
    assert frame["terminated"].tolist() == [False, True]
    assert frame["truncated"].tolist() == [True, False]
