"""Training tests: TRL's GRPOTrainer on a tiny model built here, on CPU, against real servers of a Lab."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl", reason="the train extra: pip install 'gymlab[train]'")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def grpo_config(tmp_path, **overrides):
    """A GRPOConfig for a few CPU steps: no saving, no reporting, a log line every step, fixed seed."""
    from trl import GRPOConfig

    options = dict(
        output_dir=str(tmp_path / "grpo"),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        temperature=1.0,
    )
    return GRPOConfig(**{**options, **overrides})


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread: on a busy machine two threads spin-wait on each other (a step of the tiny model
    went from 0.1 s to 3.8 s with two threads under load); the tiny model gains nothing from a second."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
