"""`gymlab envs textarena` tells the truth: what runs offline is offered, what would download is refused
without downloading, what does not compile or reset here is marked."""

from __future__ import annotations

import pytest

pytest.importorskip("textarena")
nltk = pytest.importorskip("nltk")

from gymlab import envs  # noqa: E402
from gymlab.cli.envs import listed_game  # noqa: E402
from gymlab.envs.arena_checks import nltk_has  # noqa: E402


@pytest.fixture
def no_network_downloads(monkeypatch):
    """Any nltk.download that gets through fails the test."""

    def download(*args, **kwargs):
        raise AssertionError(f"nltk.download{args} was called")

    monkeypatch.setattr(nltk, "download", download)


def test_crosswords_runs_offline_and_is_offered(no_network_downloads):
    assert listed_game("Crosswords-v0") == "Crosswords-v0"  # its clue generator script is not the game
    server, rows = envs.textarena("Crosswords-v0", seeds=[0])
    assert server.env_id == "Crosswords-v0" and len(rows) == 1


@pytest.mark.skipif(nltk_has("words"), reason="NLTK's words corpus is installed here: nothing would download")
def test_a_game_that_would_download_is_refused_without_downloading(no_network_downloads):
    line = listed_game("SpellingBee-v0")
    assert line.startswith("SpellingBee-v0  (needs NLTK data words (it would download it)"), line
    with pytest.raises(RuntimeError, match="needs NLTK data words.*downloads nothing"):
        envs.textarena("SpellingBee-v0", num_players=2, opponent=lambda seen: "[abc]")


def test_a_game_that_does_not_compile_here_is_marked():
    line = listed_game("UltimateTexasHoldem-v0")
    assert "does not compile on Python 3." in line and "UltimateTexasHoldem/env.py" in line, line


@pytest.mark.parametrize("game", ["ScorableGames-v0", "UsedCarNegotiation-v0"])
def test_a_game_whose_reset_fails_here_is_marked_and_refused(game):
    assert "does not reset here: FileNotFoundError" in listed_game(game)
    with pytest.raises(RuntimeError, match="does not load or reset here: FileNotFoundError"):
        envs.textarena(game, num_players=2, opponent=lambda seen: "[Accept]")


def test_a_game_that_needs_more_players_is_not_marked():
    assert listed_game("SecretMafia-v0") == "SecretMafia-v0"
