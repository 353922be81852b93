"""Every model family of the original eval.py, loaded from a tiny checkpoint with the variable set
of its public release, against bert4keras' own model of that family built apart in the test.

The releases differ in what they hold (google-research/bert names throughout):

- BERT (chinese_L-12_H-768_A-12), RoBERTa-wwm-ext and UER's BERT-large, converted from
  google-research/bert pre-training: absolute position embeddings, the pooler and both
  pre-training heads (MLM ``cls/predictions/*``, NSP ``cls/seq_relationship/*``);
- NEZHA (nezha_base_wwm, nezha_large_wwm): relative positions, so no position embeddings; the
  pooler and both heads; the file is ``model.ckpt-N``, not ``bert_model.ckpt``;
- WoBERT (plus) and RoFormer: pre-trained with bert4keras' MLM script, so the MLM head but no
  pooler and no NSP; RoFormer has rotary positions and no position embeddings; both have a
  word-level vocabulary (jieba words before wordpiece);
- SimBERT (base, small, tiny): a UniLM trained with a pooler-based similarity loss: the pooler
  and the MLM head, no NSP.

Large models have 24 layers; here every model is tiny, but each has its release's variable set.
"""

import os
import shutil

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer, build_transformer_model, keras
from bert_whitening.checkpoints import CheckpointError
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.encoding import encode, encode_together
from bert_whitening.models import build_encoder, build_encoders

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, original_eval_script, random_weights

#: bert4keras' own name for each family's architecture, written here apart from the package.
BERT4KERAS_MODEL = {
    "bert": "bert",
    "roberta": "bert",
    "nezha": "nezha",
    "wobert": "bert",
    "roformer": "roformer",
    "simbert": "bert",
}
WORD_LEVEL = {"wobert", "roformer"}

#: What each family's public checkpoint holds besides the encoder.
RELEASES = {
    "bert": {"positions": True, "pooler": True, "mlm": True, "nsp": True},
    "roberta": {"positions": True, "pooler": True, "mlm": True, "nsp": True},
    "nezha": {"positions": False, "pooler": True, "mlm": True, "nsp": True, "checkpoint": "model.ckpt-691689"},
    "wobert": {"positions": True, "pooler": False, "mlm": True, "nsp": False},
    "roformer": {"positions": False, "pooler": False, "mlm": True, "nsp": False},
    "simbert": {"positions": True, "pooler": True, "mlm": True, "nsp": False},
}

#: eval/eval.py's model types: family, and layer count of the release (large = 24).
# The family each of eval.py's model types loads as; the layer counts of the releases do not
# matter to which loader a directory name picks, so every model here has TINY_CONFIG's.
ORIGINAL_TYPES = {
    "BERT": "bert",
    "RoBERTa": "roberta",
    "WoBERT": "wobert",
    "NEZHA": "nezha",
    "RoFormer": "roformer",
    "BERT-large": "bert",
    "RoBERTa-large": "roberta",
    "NEZHA-large": "nezha",
    "SimBERT": "simbert",
    "SimBERT-tiny": "simbert",
    "SimBERT-small": "simbert",
}


def release_variables(family, config, seed=0):
    """The variable set of ``family``'s public checkpoint, with random values."""
    release = RELEASES[family]
    variables = random_weights(config, seed, with_pooler=release["pooler"])
    rng = np.random.default_rng(seed + 1)
    normal = lambda *shape: rng.normal(0.0, 0.3, shape).astype(np.float32)
    hidden = config["hidden_size"]
    if not release["positions"]:
        del variables["bert/embeddings/position_embeddings"]
    if release["mlm"]:
        variables.update(
            {
                "cls/predictions/transform/dense/kernel": normal(hidden, hidden),
                "cls/predictions/transform/dense/bias": normal(hidden),
                "cls/predictions/transform/LayerNorm/gamma": 1 + normal(hidden),
                "cls/predictions/transform/LayerNorm/beta": normal(hidden),
                "cls/predictions/output_bias": normal(config["vocab_size"]),
            }
        )
    if release["nsp"]:
        variables.update(
            {"cls/seq_relationship/output_weights": normal(2, hidden), "cls/seq_relationship/output_bias": normal(2)}
        )
    return variables


def write_release(directory, family, config=TINY_CONFIG, seed=0, variables=None):
    """A checkpoint directory laid out as ``family``'s release; returns the checkpoint prefix."""
    write_checkpoint(directory, config, variables or release_variables(family, config, seed), TINY_VOCAB)
    name = RELEASES[family].get("checkpoint", "bert_model.ckpt")
    if name != "bert_model.ckpt":
        for suffix in (".index", ".data-00000-of-00001"):
            os.rename(os.path.join(directory, "bert_model.ckpt" + suffix), os.path.join(directory, name + suffix))
    return os.path.join(directory, name)


def reference_vectors(directory, prefix, family, sentences):
    """``{pooling: vectors}`` from bert4keras' model of the family, pooled in numpy from its block
    outputs under the mask (and its pooler Dense, when the release has one)."""
    pooler = RELEASES[family]["pooler"]
    bert = build_transformer_model(
        os.path.join(directory, "bert_config.json"),
        prefix,
        model=BERT4KERAS_MODEL[family],
        with_pool="linear" if pooler else False,
    )
    layers = TINY_CONFIG["num_hidden_layers"]
    taps = [bert.get_layer("Transformer-%d-FeedForward-Norm" % i).output for i in range(layers)]
    if pooler:
        taps.append(bert.get_layer("Pooler-Dense").output)
    pre_tokenize = (lambda text: __import__("jieba").lcut(text, HMM=False)) if family in WORD_LEVEL else None
    tokenizer = Tokenizer(os.path.join(directory, "vocab.txt"), do_lower_case=True, pre_tokenize=pre_tokenize)
    ids = [tokenizer.encode(s, maxlen=64)[0] for s in sentences]
    padded = np.zeros((len(ids), max(map(len, ids))), dtype=np.int32)
    for row, sequence in enumerate(ids):
        padded[row, : len(sequence)] = sequence
    outputs = keras.Model(bert.inputs, taps).predict_on_batch([padded, np.zeros_like(padded)])
    mask = (padded > 0)[:, :, None]
    average = lambda states: (states * mask).sum(axis=1) / mask.sum(axis=1)
    first, last = outputs[0], outputs[layers - 1]
    vectors = {"first-last-avg": (average(first) + average(last)) / 2, "last-avg": average(last), "cls": last[:, 0]}
    if pooler:
        vectors["pooler"] = outputs[-1]
    return vectors


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """``{family: (directory, checkpoint prefix)}``, one tiny release per family."""
    root = tmp_path_factory.mktemp("releases")
    return {family: (str(root / family), write_release(str(root / family), family)) for family in RELEASES}


def poolings(family):
    """Every pooling the family's release supports."""
    return [p for p in ("first-last-avg", "last-avg", "cls", "pooler") if p != "pooler" or RELEASES[family]["pooler"]]


@pytest.mark.parametrize("family", RELEASES)
def test_each_family_loads_its_release_and_matches_bert4keras(releases, family):
    """Every pooling, built together on one load (`build_encoders`), as bert4keras computes it."""
    encoders = build_encoders(releases[family][0], model_type=family, poolings=poolings(family))
    references = reference_vectors(*releases[family], family, SENTENCES)
    vectors = encode_together(list(encoders.values()), SENTENCES, batch_size=5)
    assert sorted(references) == sorted(encoders)
    for pooling, got in zip(encoders, vectors, strict=True):
        np.testing.assert_allclose(got, references[pooling], atol=1e-5, err_msg=pooling)


def test_nezha_release_is_found_under_its_own_file_name(releases):
    directory, prefix = releases["nezha"]
    assert sorted(os.listdir(directory)) == [
        "bert_config.json",
        "model.ckpt-691689.data-00000-of-00001",
        "model.ckpt-691689.index",
        "vocab.txt",
    ]
    assert build_encoder(directory, model_type="nezha").model_identity["type"] == "nezha"


@pytest.mark.parametrize("family", ["nezha", "roformer"])
def test_relative_and_rotary_positions_change_the_vectors_on_shared_weights(releases, family, tmp_path):
    """The same weights as a BERT with zero position embeddings: only the positions differ."""
    variables = release_variables(family, TINY_CONFIG)
    variables["bert/embeddings/position_embeddings"] = np.zeros(
        (TINY_CONFIG["max_position_embeddings"], TINY_CONFIG["hidden_size"]), np.float32
    )
    write_checkpoint(str(tmp_path / "bert"), TINY_CONFIG, variables, TINY_VOCAB)
    sentences = [s for s in SENTENCES if len(s) > 2]
    as_bert = encode(build_encoder(str(tmp_path / "bert"), "bert", "last-avg"), sentences)
    as_family = encode(build_encoder(releases[family][0], family, "last-avg"), sentences)
    assert np.abs(as_family - as_bert).max(axis=1).min() > 1e-2
    with pytest.raises(CheckpointError, match="position_embeddings"):  # its layout is not BERT's
        build_encoder(releases[family][0], "bert", "last-avg")


@pytest.mark.parametrize("family", [f for f in RELEASES if not RELEASES[f]["pooler"]])
def test_pooler_on_a_release_without_pooler_weights_is_refused(releases, family):
    directory = releases[family][0]
    with pytest.raises(CheckpointError, match="%s: .*bert/pooler/dense/kernel.*needs the pooler weights" % directory):
        build_encoder(directory, model_type=family, pooling="pooler")


@pytest.mark.slow
def test_original_eval_resolves_every_model_type_by_its_directory_name(tmp_path, capsys):
    original = original_eval_script()
    assert set(original.MODEL_DIRS) == set(ORIGINAL_TYPES)
    data = tmp_path / "data" / "STS-B"
    data.mkdir(parents=True)
    pairs = [(a, b, i % 6) for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], strict=True))]
    for split in ("train", "valid", "test"):
        (data / ("STS-B.%s.data" % split)).write_text("".join("%s\t%s\t%d\n" % p for p in pairs), encoding="utf-8")
    root = tmp_path / "models"
    for model_type, family in ORIGINAL_TYPES.items():
        name = original.MODEL_DIRS[model_type][0]
        config = dict(TINY_CONFIG, hidden_size=8, num_attention_heads=2, intermediate_size=16)
        write_release(str(root / name), family, config)
        assert (
            original.main([model_type, "cls", "STS-B", "4", "--model-root", str(root), "--data-dir", str(data.parent)])
            == 0
        )
        lines = capsys.readouterr().out.splitlines()
        assert [line.split(": ")[0] for line in lines] == [
            "STS-B-train",
            "STS-B-valid",
            "STS-B-test",
            "avg",
            "w-avg",
        ], (model_type, lines)
        shutil.rmtree(root / name)
