"""TensorFlow's saved_model_cli with the tensorflow-text ops registered, on exports."""

import os
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening.encoding import encode, tokenize
from bert_whitening.serving import pad_ids
from export.test_saved_model import on_the_export

from helpers import SENTENCES

pytestmark = pytest.mark.slow


def saved_model_cli(*args, wrapper=False):
    command = (
        [sys.executable, "-m", "bert_whitening.export.saved_model_cli"]
        if wrapper
        else [os.path.join(os.path.dirname(sys.executable), "saved_model_cli")]
    )
    return subprocess.run(command + list(args), capture_output=True, text=True)


@on_the_export
def test_saved_model_cli_shows_both_signatures(exported):
    shown = saved_model_cli("show", "--all", "--dir", exported[1])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    default = text[text.index("signature_def['serving_default']") :]
    for name in ("input_ids", "segment_ids"):
        block = default[default.index("inputs['%s']" % name) :]
        assert block.index("dtype: DT_INT32") < block.index("shape: (-1, -1)") < 120
    assert "outputs['embedding']" in default and "shape: (-1, 16)" in default
    served_text = text[text.index("signature_def['serve_text']") : text.index("signature_def['serve_text_dimensions']")]
    assert "inputs['text']" in served_text and "dtype: DT_STRING" in served_text
    assert "shape: (-1)" in served_text and "shape: (-1, 16)" in served_text
    for name in ("serve_dimensions", "serve_text_dimensions"):
        served = text[text.index("signature_def['%s']" % name) :]
        block = served[served.index("inputs['dimensions']") :]
        assert block.index("dtype: DT_INT32") < block.index("shape: ()") < 120
        output = served[served.index("outputs['embedding']") :]
        assert output.index("dtype: DT_FLOAT") < output.index("shape: (-1, -1)") < 120


@on_the_export
def test_saved_model_cli_runs_serving_default(whitened, exported, over_version_7, tmp_path):
    sequences, _ = tokenize(whitened, SENTENCES[:3])
    ids = pad_ids(sequences)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "segments.npy", np.zeros_like(ids))
    inputs = "input_ids=%s;segment_ids=%s" % (tmp_path / "ids.npy", tmp_path / "segments.npy")
    expected = encode(whitened, SENTENCES[:3])
    for directory, wrapper in ((over_version_7[2], False), (exported[1], True)):
        out = tmp_path / ("out_%s" % wrapper)
        run = saved_model_cli(
            "run",
            "--dir",
            directory,
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--inputs",
            inputs,
            "--outdir",
            str(out),
            wrapper=wrapper,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        np.testing.assert_allclose(np.load(out / "embedding.npy"), expected, atol=1e-5)
