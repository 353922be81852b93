"""A dimension chosen at serving time: what ``serve_dimensions`` cuts, and what it must equal.

Whitened coordinates are ordered by variance, so the first ``d`` of ``k`` are the whitening kept
at ``d``: ``serve_dimensions`` takes ``dimensions`` = ``d`` and returns them normalised, the
vectors ``encode`` gives at ``n_components = d``. An encoder has such coordinates only with a
whitening kept at ``k`` > 0, no flow, and the normalisation: the pooled vectors (``k`` = 0) and a
flow's are not ordered by variance, and without the normalisation the first ``d`` coordinates are
a slice of ``serving_default``'s output, which a client takes itself.
"""

import dataclasses
from typing import Optional

from bert_whitening.backend import keras
from bert_whitening.layers import L2Normalize, WhiteningDense


@dataclasses.dataclass(frozen=True)
class Coordinates:
    """An encoder's whitened coordinates: ``model`` gives them before the normalisation (its
    inputs are the encoder's), ``pooled`` gives the pooled vectors they are computed from,
    ``normalize`` is the encoder's normalisation layer and ``k`` their number."""

    model: object
    pooled: object
    normalize: object
    k: int


def whitened_coordinates(encoder) -> Optional[Coordinates]:
    """The `Coordinates` of ``encoder`` (a `bert_whitening.models.Encoder`), or None when it has
    none that a prefix of keeps its meaning (see the module docstring; a flow keeps k = 0)."""
    if not encoder.n_components or not encoder.normalize:
        return None
    layers = encoder.model.layers
    whitening = next(layer for layer in layers if isinstance(layer, WhiteningDense))
    normalize = next(layer for layer in layers if isinstance(layer, L2Normalize))
    inputs = encoder.model.inputs
    return Coordinates(
        keras.Model(inputs, whitening.output), keras.Model(inputs, whitening.input), normalize, encoder.n_components
    )


def verified_dimensions(k):
    """The ``dimensions`` the export's verification serves: one, about half and all ``k``."""
    return sorted({1, (k + 1) // 2, k})


def refused_dimensions(k):
    """``dimensions`` just outside ``1..k``, which the served graph must refuse."""
    return [0, k + 1]


def encoded_at(whitening, pooled, d):
    """The vectors ``encode`` gives of ``pooled`` vectors (numpy) with ``whitening`` kept at
    ``n_components = d``: the layers `bert_whitening.models.finish` ends such an encoder with."""
    kept = WhiteningDense.from_whitening(whitening, d)(pooled)
    return L2Normalize()(kept).numpy()
