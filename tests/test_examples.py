"""The examples run and show what they claim: the character model learns with the LLTM."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_char_model_learns_with_the_lltm_as_with_the_lstm(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    char_model = _load("char_model")
    plot = tmp_path / "losses.png"
    args = ["--steps", "60", "--batch", "16", "--length", "32", "--state", "64"]
    results = char_model.main([*args, "--plot", str(plot)])
    vocab = len(set(char_model.corpus()))
    no_learning = math.log(vocab)
    by_layer = {r.layer: r for r in results}
    assert set(by_layer) == {"LLTM", "LSTM"}
    for r in results:
        assert len(r.losses) == 60 and r.tokens_per_second > 0
        # from about ln V (predicting every character alike) to far below it, on text
        # the model never trained on
        assert abs(r.losses[0] - no_learning) < 0.5
        assert r.validation < 0.75 * no_learning, (r.layer, r.validation, no_learning)
        assert sum(r.losses[-10:]) / 10 < r.losses[0] - 1.0
    # the LLTM learns about as well as the LSTM of the same state size
    assert by_layer["LLTM"].validation < by_layer["LSTM"].validation + 0.5
    assert plot.stat().st_size > 0
    out = capsys.readouterr().out
    assert "held-out" in out and "LLTM" in out and "LSTM" in out
