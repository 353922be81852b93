"""The export's fresh-process verification: a wrong or unloadable export is refused and leaves nothing."""

import os
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening.export import ExportError, ExportOptions, export_saved_model, run_in_fresh_process
from bert_whitening.export.saved_model import ServingModule
from bert_whitening.layers import fused_bert
from export.test_saved_model import CHILD_IMPORTS

pytestmark = pytest.mark.slow


def test_failed_verification_leaves_nothing(whitened, tmp_path):
    base = str(tmp_path / "m")
    with pytest.raises(ExportError, match="differs from the Keras model by .* nothing was written"):
        export_saved_model(whitened, base, tolerance=-1.0)
    assert os.listdir(tmp_path) == []  # not even an empty BASE


@pytest.mark.parametrize("wrong_when_packed", [True, False])
def test_a_served_graph_wrong_on_packed_or_on_unpacked_batches_is_refused(
    whitened, tmp_path, monkeypatch, wrong_when_packed
):
    """A server's graph runs a batch that is mostly padding packed, any other on every row: the
    verification runs both kinds of batch, so an export wrong on either leaves nothing."""
    forward = fused_bert.FusedBert._forward

    def wrong_when_served(self, ids, segments, products, packed):
        outputs = forward(self, ids, segments, products, packed)
        return [x + 1.0 for x in outputs] if fused_bert._SERVING.get() and packed == wrong_when_packed else outputs

    monkeypatch.setattr(fused_bert.FusedBert, "_forward", wrong_when_served)
    with pytest.raises(ExportError, match="differs from the Keras model by"):
        export_saved_model(whitened, str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("signature", ["_embed", "_embed_text"])
def test_a_signature_off_by_more_than_float_noise_is_refused_by_default(encoders, tmp_path, monkeypatch, signature):
    """The default tolerance is float32's noise (1e-5): ``serving_default`` or ``serve_text`` alone
    off by 1e-4 is not published; a tolerance given is the one applied."""
    pooled = encoders["first-last-avg"]  # not normalised: any vector is one it could give

    original = getattr(ServingModule, signature)

    def off(self, *inputs):
        return {"embedding": original(self, *inputs)["embedding"] + 1e-4}

    monkeypatch.setattr(ServingModule, signature, off)
    with pytest.raises(ExportError, match=r"differs from the Keras model by 0.000[01]\d* \(tolerance 1e-05\)"):
        export_saved_model(pooled, str(tmp_path / "m"), ExportOptions(text=True))
    assert os.listdir(tmp_path) == []
    path, difference = export_saved_model(pooled, str(tmp_path / "m"), ExportOptions(text=True), tolerance=2e-4)
    assert 0.5e-4 <= difference <= 1.5e-4 and os.path.isdir(path)


def test_a_child_that_cannot_load_the_export_is_an_error_with_its_reason(tmp_path):
    """The verification child on a directory that holds no SavedModel: its exit status and
    TensorFlow's own reason, not a missing response file."""
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(ExportError) as error:
        run_in_fresh_process(str(tmp_path / "not_a_model"), np.array([[2, 3]], np.int32))
    message = str(error.value)
    assert message.startswith("the exported SavedModel failed to load or run in a fresh process (exit status 1)")
    assert "SavedModel file does not exist" in message, message[-500:]
    assert not (tmp_path / "not_a_model" / ".verify").exists()


def test_the_verification_child_loads_tensorflow_alone():
    """As a server would: TensorFlow (and tensorflow-text for serve_text), not bert4keras."""
    child = subprocess.run([sys.executable, "-c", CHILD_IMPORTS], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split("\n")[-2] == "['tensorflow', 'tensorflow_text']", child.stdout


def _not_renormalised(self, input_ids, segment_ids, dimensions):
    """The vectors at k cut to ``dimensions``."""
    dimensions, input_ids = self._checked_dimensions(dimensions, input_ids)
    return {"embedding": self.serve_ids(input_ids, segment_ids)["embedding"][:, :dimensions]}


def _clipped(self, input_ids, segment_ids, dimensions):
    """No check of ``dimensions``: the slice clips it."""
    return {"embedding": self._normalize(self.coordinates(input_ids, segment_ids)[:, :dimensions])}


def _off_by_2e_6(self, input_ids, segment_ids, dimensions):
    """Within the export's tolerance of encode at d (1e-5), not of the cut (1e-6)."""
    return {"embedding": RIGHT(self, input_ids, segment_ids, dimensions)["embedding"] + 2e-6}


RIGHT = ServingModule._embed_dimensions


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            _not_renormalised,
            r"serve_dimensions at dimensions 1 differs by [\d.e+-]+ from serving_default's vectors cut",
        ),
        (_clipped, r"serve_dimensions refused dimensions \[\] of \[1, 8, 16, 0, 17\]: it must answer 1..16"),
        (_off_by_2e_6, r"serve_dimensions at dimensions 1 differs by 2\.\d*e-06 .* \(tolerance 1e-06\)"),
    ],
    ids=["not-renormalised", "clipped", "off-by-2e-6"],
)
def test_a_wrong_serve_dimensions_is_refused_and_leaves_nothing(whitened, tmp_path, monkeypatch, wrong, message):
    """The verification serves dimensions 1, k/2 and k, and 0 and k + 1: a graph that does not
    renormalise the cut, clips a dimensions outside 1..k or is off by more than 1e-6 of the
    vectors served at k cut and renormalised is not published."""
    monkeypatch.setattr(ServingModule, "_embed_dimensions", wrong)
    with pytest.raises(ExportError, match=message):
        export_saved_model(whitened, str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []


def test_a_bfloat16_export_s_dimensions_are_verified_against_the_bfloat16_graph(whitened, encoders, tmp_path):
    """The vectors at ``d`` are compared with the pooled vectors of the graph a bfloat16 export
    saves, traced here, not with float32's, which its products' rounding moves past 1e-5."""
    from bert_whitening.backend import tf
    from bert_whitening.models import with_whitening

    encoder = with_whitening(encoders["first-last-avg"], whitened.whitening, 4)
    path, difference = export_saved_model(encoder, str(tmp_path / "m"), ExportOptions(precision="bfloat16"))
    assert difference <= 1e-5
    assert sorted(tf.saved_model.load(path).signatures) == ["serve_dimensions", "serving_default"]
