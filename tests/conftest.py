import pytest

TINY_VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
              + list("今天气很好我们你他她是的不在有一个人中国北京上海爱喝茶咖啡猫狗跑吃饭学习工作。，！？")
              + ["the", "a", "cat", "dog", "is", "on", "mat", "run", "##s", "##ing", "hello",
                 "world", "good", "bad", "weather", "today", ",", ".", "!", "?", "我们", "北京"])

TINY_CONFIG = {
    "vocab_size": len(TINY_VOCAB), "hidden_size": 24, "num_hidden_layers": 3,
    "num_attention_heads": 4, "intermediate_size": 48, "hidden_act": "gelu",
    "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
}

SENTENCES = [
    "今天天气很好", "我们在北京", "你爱喝茶还是咖啡？", "他在上海工作", "猫和狗在跑",
    "the cat is on the mat", "hello world!", "good weather today", "the dogs are running",
    "中国人爱喝茶", "我不在学习", "", "a", "她是一个好人。", "吃饭了吗", "the cat runs, the dog runs.",
]


def tiny_weights(config, seed=0, with_pooler=True):
    from bert_whitening.checkpoints import random_weights

    return random_weights(config, seed, with_pooler)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny random BERT written as a real Google-format checkpoint directory."""
    from bert_whitening.checkpoints import write_checkpoint

    directory = str(tmp_path_factory.mktemp("models") / "tiny_bert")
    weights = tiny_weights(TINY_CONFIG)
    write_checkpoint(directory, TINY_CONFIG, weights, TINY_VOCAB)
    return directory, weights


@pytest.fixture(scope="session")
def encoders(tiny_model):
    """One tiny encoder per pooling, built once for the session."""
    from bert_whitening.models import build_encoder
    from bert_whitening.names import POOLINGS

    directory, _ = tiny_model
    return {pooling: build_encoder(directory, pooling=pooling) for pooling in POOLINGS}


@pytest.fixture(scope="session")
def whitened(encoders):
    """The tiny first-last-avg encoder with a whitening (k = 16) and normalisation."""
    import numpy as np

    from bert_whitening.encoding import encode
    from bert_whitening.models import with_whitening
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    encoder = encoders["first-last-avg"]
    rng = np.random.default_rng(0)
    vectors = encode(encoder, SENTENCES * 4) + rng.normal(scale=0.05, size=(64, 24))
    whitening = fit_whitening(WhiteningStats().update(vectors), pooling="first-last-avg")
    return with_whitening(encoder, whitening, 16)


@pytest.fixture(scope="session")
def exported(whitened, tmp_path_factory):
    """``(base, path, difference)`` of the whitened tiny encoder exported with both signatures."""
    from bert_whitening.export import export_saved_model

    base = str(tmp_path_factory.mktemp("export") / "encoder")
    path, difference = export_saved_model(whitened, base, text=True, metadata={"note": "test"})
    return base, path, difference
