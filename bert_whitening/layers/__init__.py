"""Keras layers of the sentence encoder, one per file."""

from bert_whitening.layers.first_token_pooling import FirstTokenPooling
from bert_whitening.layers.flow_transform import FlowTransform
from bert_whitening.layers.fused_bert import FusedBert
from bert_whitening.layers.l2_normalize import L2Normalize
from bert_whitening.layers.masked_average_pooling import MaskedAveragePooling
from bert_whitening.layers.whitening_dense import WhiteningDense

CUSTOM_OBJECTS = {
    layer.__name__: layer
    for layer in (FirstTokenPooling, FlowTransform, FusedBert, L2Normalize, MaskedAveragePooling, WhiteningDense)
}

__all__ = [
    "FirstTokenPooling",
    "FlowTransform",
    "FusedBert",
    "L2Normalize",
    "MaskedAveragePooling",
    "WhiteningDense",
    "CUSTOM_OBJECTS",
]
