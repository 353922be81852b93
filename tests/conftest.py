import gc
import os
import shutil

import pytest

from bert_whitening.export import ExportOptions, export_saved_model
from bert_whitening.names import POOLINGS
from bert_whitening.retrieval import search as search_module
from bert_whitening.retrieval.index_directory import IndexDirectory

from helpers import (
    MANY,
    SENTENCES,
    TINY_CONFIG,
    TINY_VOCAB,
    hf_tensors,
    random_pairs,
    random_weights,
    run,
    synthetic_pairs,
    write_corpus,
    write_hf,
    write_pairs,
)

# Every command the tests run, in this process, in children and in Beam workers, encodes in
# float32 on any CPU, so vectors compare at 1e-5; tests/test_precision.py takes the pin off.
os.environ["BERT_WHITENING_PRECISION"] = "float32"


def pytest_unconfigure(config):
    """A test process exits without the last garbage collection, as the commands do
    (`bert_whitening.cli.console_main`): after a session of models, it takes seconds."""
    gc.freeze()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny random BERT written as a real Google-format checkpoint directory."""
    from bert_whitening.checkpoints.google import write_checkpoint

    directory = str(tmp_path_factory.mktemp("models") / "tiny_bert")
    weights = random_weights(TINY_CONFIG)
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
    from bert_whitening.export import ExportOptions, export_saved_model

    base = str(tmp_path_factory.mktemp("export") / "encoder")
    path, difference = export_saved_model(whitened, base, ExportOptions(text=True), metadata={"note": "test"})
    return base, path, difference


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    """A train and a valid pair file of random labels on `SENTENCES` (the tests of fine-tuning)."""
    directory = tmp_path_factory.mktemp("pairs")
    return write_pairs(directory / "train.data", random_pairs(0)), write_pairs(
        directory / "valid.data", random_pairs(1)
    )


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_model):
    """A sentence corpus, a whitening fitted on it, its encode output and its index directory
    (built once: tests write their own outputs elsewhere)."""
    tmp_path = tmp_path_factory.mktemp("indexed")
    model = tiny_model[0]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(s + "\n" for s in MANY[:60]), encoding="utf-8")
    whitening, vectors, index = tmp_path / "w.npz", tmp_path / "v.npy", tmp_path / "index"
    assert run("fit", "--model", model, "--output", whitening, corpus) == 0
    assert (
        run("encode", "--model", model, "--whitening", whitening, "--n-components", 12, "--output", vectors, corpus)
        == 0
    )
    assert (
        run("index", "--model", model, "--whitening", whitening, "--n-components", 12, "--output", index, corpus) == 0
    )
    return model, corpus, whitening, vectors, index


@pytest.fixture
def swapped_while_open(indexed, tmp_path, monkeypatch):
    """A copy of ``indexed``'s index, and another index of the same encoder and row count that
    is renamed over it as soon as a command has opened (and checked) it."""
    model, corpus, whitening, vectors, index = indexed
    mine, other, other_corpus = tmp_path / "index", tmp_path / "other", tmp_path / "other.txt"
    shutil.copytree(index, mine)
    other_corpus.write_text("".join(s + "\n" for s in MANY[20:80]), encoding="utf-8")  # MANY[5] not in it
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--output", other, other_corpus]
    assert run("index", *argv) == 0

    class SwappedWhileOpen(IndexDirectory):
        def __init__(self, directory):
            super().__init__(directory)
            if os.path.exists(other):
                os.rename(mine, tmp_path / "retired")
                os.rename(other, mine)

    monkeypatch.setattr(search_module, "IndexDirectory", SwappedWhileOpen)
    return mine


@pytest.fixture
def files(tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(s + "\n" for s in MANY[:50]), encoding="utf-8")
    pairs = tmp_path / "pairs.data"
    pairs.write_text(
        "".join("%s\t%s\t%d\n" % (a, b, i % 6) for i, (a, b) in enumerate(zip(MANY[50:65], MANY[65:80], strict=True))),
        encoding="utf-8",
    )
    return tmp_path, str(sentences), str(pairs)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    tensors = hf_tensors(TINY_CONFIG)
    return write_hf(str(tmp_path_factory.mktemp("hf") / "tiny_hf"), tensors), tensors


@pytest.fixture
def tensors_never_read(monkeypatch):
    """Fail the test if the tensors of a model.safetensors are loaded: its header must do."""
    from bert_whitening.checkpoints import huggingface

    def read(path):
        raise AssertionError("the tensors of %s were read" % path)

    monkeypatch.setattr(huggingface, "variable_reader", lambda path: lambda name: read(path))


@pytest.fixture(scope="module")
def together(tiny_model):
    """Every pooling of the tiny model, built together."""
    from bert_whitening.models import build_encoders

    return build_encoders(tiny_model[0], poolings=POOLINGS)


@pytest.fixture
def model_copy(tiny_model, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(tiny_model[0], directory)
    return directory


@pytest.fixture(scope="module")
def over_version_7(whitened, tmp_path_factory):
    """``(parent, base, path)``: the whitened tiny encoder exported without ``serve_text`` (which
    plain saved_model_cli cannot load) as version 7 over an existing ``BASE/7``."""
    parent = tmp_path_factory.mktemp("versions")
    base = str(parent / "m")
    os.makedirs(os.path.join(base, "7", "old"))
    os.makedirs(os.path.join(base, "notes"))
    path, _ = export_saved_model(whitened, base, ExportOptions(version=7, overwrite=True))
    return parent, base, path


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus")


@pytest.fixture(scope="module")
def sample_task(tmp_path_factory):
    """A senteval_cn task SAMPLE with three splits (90/60/60 pairs) over the tiny vocabulary."""
    root = tmp_path_factory.mktemp("senteval")
    (root / "SAMPLE").mkdir()
    lines = ["%s\t%s\t%d\n" % pair for pair in synthetic_pairs(210)]
    for split, part in (("train", lines[:90]), ("valid", lines[90:150]), ("test", lines[150:])):
        (root / "SAMPLE" / ("SAMPLE.%s.data" % split)).write_text("".join(part), encoding="utf-8")
    return str(root)
