"""Searches the planner's tests share: the validation rows (test_validation.py) and the catalogue recipes
(test_search_finds_best.py) ask for the same model, platform, GPUs, sequence and batch, and each search takes
seconds, so each runs once a session."""
import pytest

from moeforge.compiler.planner import search


@pytest.fixture(scope="session")
def planned():
    """search.search(setting, top=1), once per (model, platform, GPUs, seq, GBS, forced balancing)."""
    done: dict = {}

    def get(s):
        key = (s.model, s.platform, s.gpus, s.seq, s.gbs, s.force_balance)
        if key not in done:
            done[key] = search.search(s, top=1)
        return done[key]
    return get
