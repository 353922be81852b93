"""What ``serve_dimensions`` cuts and what it must equal (`bert_whitening.export.dimensions`),
against the whitening's own arrays and `Whitening.transform`, computed apart from the layers."""

import dataclasses

import numpy as np
import pytest

from bert_whitening.encoding import encode, tokenize
from bert_whitening.export.dimensions import (
    encoded_at,
    refused_dimensions,
    verified_dimensions,
    whitened_coordinates,
)
from bert_whitening.models import finish, with_whitening
from bert_whitening.serving import pad_ids

from helpers import SENTENCES


def test_the_coordinates_are_the_whitened_vectors_before_the_normalisation(whitened, encoders):
    coordinates = whitened_coordinates(whitened)
    assert coordinates.k == 16
    ids = pad_ids(tokenize(whitened, SENTENCES)[0])
    inputs = [ids, np.zeros_like(ids)]
    pooled = encode(encoders["first-last-avg"], SENTENCES)
    np.testing.assert_allclose(coordinates.pooled.predict(inputs, verbose=0), pooled, atol=1e-6)
    whitening = whitened.whitening
    raw = (pooled.astype(np.float64) + whitening.bias) @ whitening.kernel[:, :16]
    np.testing.assert_allclose(coordinates.model.predict(inputs, verbose=0), raw, rtol=1e-5, atol=1e-5)
    unit = coordinates.normalize(raw.astype(np.float32)).numpy()
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("d", [1, 7, 16])
def test_encoded_at_d_is_the_whitening_kept_at_d(whitened, encoders, d):
    """The verification's reference: what ``encode`` gives at ``n_components = d``, and
    `Whitening.transform` there, from the same pooled vectors."""
    encoder = encoders["first-last-avg"]
    pooled = encode(encoder, SENTENCES)
    vectors = encoded_at(whitened.whitening, pooled, d)
    assert vectors.shape == (len(SENTENCES), d) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, whitened.whitening.transform(pooled, n_components=d), atol=1e-6)
    np.testing.assert_allclose(vectors, encode(with_whitening(encoder, whitened.whitening, d), SENTENCES), atol=1e-6)


def test_no_coordinates_without_a_whitening_or_the_normalisation_or_with_a_flow(whitened, encoders):
    """Pooled vectors (k = 0) and a flow's are not ordered by variance; without the normalisation
    the first d coordinates are a slice of serving_default's output."""
    from bert_whitening.flow import Flow, FlowConfig

    pooled = encoders["cls"]
    assert whitened_coordinates(pooled) is None
    assert whitened_coordinates(with_whitening(pooled)) is None  # normalised, k = 0
    unnormalised = finish(encoders["first-last-avg"], dataclasses.replace(whitened.config, normalize=False))
    assert unnormalised.n_components == 16 and whitened_coordinates(unnormalised) is None
    flow = Flow(24, FlowConfig(n_levels=2, depth=1))
    flowed = finish(pooled, dataclasses.replace(pooled.config, flow=flow, normalize=True))
    assert flowed.config.stages == ("model", "flow") and whitened_coordinates(flowed) is None


def test_the_verified_and_refused_dimensions():
    assert verified_dimensions(16) == [1, 8, 16] and verified_dimensions(7) == [1, 4, 7]
    assert verified_dimensions(2) == [1, 2] and verified_dimensions(1) == [1]
    assert refused_dimensions(16) == [0, 17]
