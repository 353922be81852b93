"""What a model's configuration rules before anything is built (`bert_whitening.checkpoints.architecture`):
which configurations `FusedBert` computes, and the sizes it takes from them (no TensorFlow)."""

import types

import pytest

from bert_whitening.checkpoints.architecture import (
    check_trainable,
    fused_bert_sizes,
    not_fused_because,
    runs_fused,
)
from bert_whitening.errors import TrainingError
from bert_whitening.names import MODEL_TYPES

from helpers import TINY_CONFIG

BERT = MODEL_TYPES["bert"]


def test_a_plain_bert_configuration_runs_fused():
    assert not_fused_because(BERT, TINY_CONFIG) is None
    assert runs_fused(BERT, TINY_CONFIG)
    assert not_fused_because(BERT, {**TINY_CONFIG, "hidden_act": "gelu_erf"}) is None


@pytest.mark.parametrize(
    "family, change, said",
    [
        ("nezha", {}, "the nezha architecture"),
        ("roformer", {}, "the roformer architecture"),
        ("bert", {"embedding_size": 16}, "key 'embedding_size', which a BERT configuration does not have"),
        ("bert", {"embedding_size": 16, "pool_act": "x"}, "keys 'embedding_size', 'pool_act'"),
        ("bert", {"hidden_act": "relu"}, "hidden_act 'relu', not gelu"),
    ],
)
def test_what_fused_bert_does_not_compute_is_named(family, change, said):
    config = {**TINY_CONFIG, **change}
    assert said in not_fused_because(MODEL_TYPES[family], config)
    assert not runs_fused(MODEL_TYPES[family], config)


def test_only_a_configuration_fused_bert_computes_is_trainable():
    plain = types.SimpleNamespace(config=TINY_CONFIG, config_path="m/bert_config.json")
    check_trainable(plain, "bert", TrainingError)
    relu = types.SimpleNamespace(config={**TINY_CONFIG, "hidden_act": "relu"}, config_path="m/bert_config.json")
    with pytest.raises(TrainingError, match="^m/bert_config.json: only a plain BERT can be trained.*hidden_act 'relu'"):
        check_trainable(relu, "BERT", TrainingError)


def test_fused_bert_sizes_take_bert4keras_defaults_where_the_configuration_is_silent():
    sizes = fused_bert_sizes(TINY_CONFIG)
    assert sizes == {
        "vocab_size": TINY_CONFIG["vocab_size"],
        "segment_vocab_size": 2,
        "max_position": 64,
        "hidden": 24,
        "heads": 4,
        "intermediate": 48,
        "blocks": 3,
    }
    bare = {
        key: value for key, value in TINY_CONFIG.items() if key not in ("type_vocab_size", "max_position_embeddings")
    }
    assert fused_bert_sizes(bare)["segment_vocab_size"] == 2 and fused_bert_sizes(bare)["max_position"] == 512
