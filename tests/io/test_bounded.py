"""Sizes are checked before they are allocated (`bert_whitening.io.bounded`): a model configuration,
a whitening or flow ``.npz``, a model file and an input line that claim or hold too much are
refused in bounded time and memory, by a one-line error naming the file, whichever path reads them."""

import errno
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest

from bert_whitening.data import read_pairs, read_sentences
from bert_whitening.errors import CheckpointError, DataError, FlowError, WhiteningError
from bert_whitening.io.bounded import FLOW_BYTES, FLOW_SIZES, FLOW_WEIGHTS_PER_STEP, LINE_BYTES, MODEL_SIZES
from bert_whitening.io.files import npy_blocks
from bert_whitening.whitening import Whitening, WhiteningStats, fit_whitening

from helpers import TINY_CONFIG, TINY_VOCAB, here, random_weights, refused

#: What a refusal may take, in seconds and in bytes allocated by Python on the way.
SECONDS, BYTES = 10, 64 << 20


def refused_quickly(call, error, *fragments):
    """``call()`` raises ``error`` holding every fragment, within `SECONDS` and `BYTES`, in a
    thread: a reader that blocks (a FIFO) fails the test instead of hanging it."""
    outcome = {}

    def run():
        tracemalloc.start()
        try:
            call()
        except Exception as raised:  # noqa: BLE001 -- checked below
            outcome["error"] = raised
        outcome["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SECONDS)
    assert not thread.is_alive(), "still reading after %d s" % SECONDS
    assert time.perf_counter() - started < SECONDS
    assert isinstance(outcome.get("error"), error), outcome.get("error")
    message = str(outcome["error"])
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert outcome["peak"] < BYTES, "%d bytes allocated before the refusal" % outcome["peak"]
    return message


# --- model configurations ----------------------------------------------------------------------


@pytest.fixture
def model_copy(tiny_model, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(tiny_model[0], directory)
    return directory


def set_config(directory, name="bert_config.json", **changes):
    path = os.path.join(directory, name)
    with open(path, encoding="utf-8") as stream:
        config = json.load(stream)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump({**config, **changes}, stream)


@pytest.fixture
def nothing_built(monkeypatch):
    """Fail the test if a transformer is built: a refusal must come first."""
    import bert_whitening.models as models

    def built(*args, **kwargs):
        raise AssertionError("a transformer was built before the refusal")

    monkeypatch.setattr(models, "FusedBert", built)
    monkeypatch.setattr(models, "build_transformer_model", built)


@pytest.mark.parametrize(
    "key, value",
    [
        ("hidden_size", 10**6),
        ("num_hidden_layers", 10**5),
        ("intermediate_size", 10**9),
        ("vocab_size", 10**9),
        ("max_position_embeddings", 10**8),
        ("type_vocab_size", 10**7),
        ("num_attention_heads", "4"),
        ("num_attention_heads", True),  # a bool is an int to isinstance
        ("hidden_size", 0),
        ("embedding_size", 10**6),
    ],
)
def test_a_config_beyond_the_bounds_is_refused_before_anything_is_built(model_copy, nothing_built, key, value):
    from bert_whitening.models import build_encoder

    set_config(model_copy, **{key: value})
    refused_quickly(
        lambda: build_encoder(model_copy),
        CheckpointError,
        "bert_config.json: %s is %r, expected a whole number from 1 to %d" % (key, value, MODEL_SIZES[key]),
    )


@pytest.mark.parametrize(
    "changes, said",
    [
        ({"hidden_size": 4096, "num_attention_heads": 4}, "hidden_size 4096 (bert/embeddings/word_embeddings is"),
        ({"num_hidden_layers": 128}, "num_hidden_layers 128 (it holds 3 layers)"),
        ({"intermediate_size": 60000}, "intermediate_size 60000 (bert/encoder/layer_0/intermediate/dense/kernel"),
        ({"max_position_embeddings": 60000}, "max_position_embeddings 60000 (bert/embeddings/position_embeddings"),
        ({"type_vocab_size": 1000}, "type_vocab_size 1000 (bert/embeddings/token_type_embeddings is (2, 24))"),
        ({"type_vocab_size": 3}, "type_vocab_size 3 (bert/embeddings/token_type_embeddings is (2, 24))"),  # by one
    ],
)
@pytest.mark.parametrize("model_type", ["bert", "nezha"])
def test_a_config_larger_than_its_checkpoint_is_refused_before_anything_is_built(
    model_copy, nothing_built, changes, said, model_type
):
    from bert_whitening.models import build_encoder

    if model_type == "nezha" and "max_position_embeddings" in changes:
        pytest.skip("NEZHA has no position table: its max_position_embeddings allocates nothing")
    set_config(model_copy, **changes)
    refused_quickly(
        lambda: build_encoder(model_copy, model_type, pooling="cls"),
        CheckpointError,
        "copy: bert_config.json gives larger sizes than bert_model.ckpt holds: ",
        said,
    )


def test_a_checkpoint_without_a_table_that_bears_a_size_is_refused_before_the_build(tmp_path, nothing_built):
    from bert_whitening.checkpoints.google import write_checkpoint
    from bert_whitening.models import build_encoder

    weights = random_weights(TINY_CONFIG)
    del weights["bert/embeddings/word_embeddings"]
    write_checkpoint(str(tmp_path / "model"), TINY_CONFIG, weights, TINY_VOCAB)
    refused_quickly(
        lambda: build_encoder(str(tmp_path / "model")), CheckpointError, "bert/embeddings/word_embeddings is missing"
    )


def test_a_hugging_face_config_is_bounded_by_the_same_check(tmp_path, nothing_built):
    from bert_whitening.models import build_encoder

    directory = tmp_path / "hf"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**TINY_CONFIG, "model_type": "bert", "hidden_size": 10**6}))
    (directory / "vocab.txt").write_text("".join(token + "\n" for token in TINY_VOCAB))
    (directory / "model.safetensors").write_bytes(b"")
    refused_quickly(
        lambda: build_encoder(str(directory)), CheckpointError, "config.json: hidden_size is 1000000, expected"
    )


SMALLEST = {"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 1}


@pytest.mark.parametrize(
    "config, said",
    [
        (SMALLEST, None),
        (MODEL_SIZES, None),  # every size at its largest
        ({**SMALLEST, "hidden_size": 12, "num_attention_heads": 4}, None),
        ({"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 8}, "lacks vocab_size, hidden_size"),
        ({**SMALLEST, "hidden_size": 8193}, ": hidden_size is 8193, expected a whole number from 1 to 8192"),
        ({**SMALLEST, "type_vocab_size": 0}, ": type_vocab_size is 0, expected a whole number from 1 to 1024"),
        ({**SMALLEST, "embedding_size": None}, ": embedding_size is None, expected a whole number from 1 to 8192"),
        (
            {**SMALLEST, "hidden_size": 10, "num_attention_heads": 4},
            ": hidden_size 10 is not a multiple of num_attention_heads 4: the heads split it evenly",
        ),
    ],
    ids=["smallest", "largest", "heads split it", "missing", "too large", "zero", "None", "heads do not split it"],
)
def test_a_config_is_held_to_whole_sizes_within_the_bounds_before_anything_is_built(config, said):
    """The check itself, numpy only: a size left out (but the required ones) is 1."""
    from bert_whitening.io.bounded import check_model_sizes

    if said is None:
        check_model_sizes(config, "m/bert_config.json", CheckpointError)
        return
    with pytest.raises(CheckpointError) as raised:
        check_model_sizes(config, "m/bert_config.json", CheckpointError)
    assert str(raised.value) == "m/bert_config.json" + (" " if said.startswith("lacks") else "") + said


# --- model files that are not regular files or too large ---------------------------------------


def fifo(path):
    os.remove(path)
    os.mkfifo(path)


def dev_zero(path):
    os.remove(path)
    os.symlink("/dev/zero", path)


def sparse(size):
    def make(path):
        with open(path, "r+b") as stream:
            stream.truncate(size)

    return make


@pytest.mark.parametrize(
    "name, make, said",
    [
        ("vocab.txt", fifo, "a FIFO, not a regular file"),
        ("vocab.txt", dev_zero, "a character device, not a regular file"),
        ("vocab.txt", sparse((64 << 20) + 1), "larger than 67108864 bytes"),
        ("bert_config.json", fifo, "a FIFO, not a regular file"),
        ("bert_config.json", dev_zero, "a character device, not a regular file"),
        ("bert_config.json", sparse((1 << 20) + 1), "larger than 1048576 bytes"),
        ("bert_model.ckpt.index", fifo, "a FIFO, not a regular file"),
        ("bert_model.ckpt.index", sparse((64 << 20) + 1), "larger than 67108864 bytes"),
        ("bert_model.ckpt.data-00000-of-00001", fifo, "a FIFO, not a regular file"),
    ],
)
def test_a_model_file_that_is_a_fifo_a_device_or_too_large_is_refused(model_copy, name, make, said):
    from bert_whitening.checkpoints import find_model

    make(os.path.join(model_copy, name))
    refused_quickly(lambda: find_model(model_copy), CheckpointError, os.path.join(model_copy, name), said)


def test_a_file_is_read_whole_up_to_its_limit(tmp_path):
    """Over several reads (of 64 KB), and at exactly the limit."""
    from bert_whitening.io.bounded import read_limited

    data = np.random.default_rng(0).bytes(150_000)
    (tmp_path / "f").write_bytes(data)
    assert read_limited(str(tmp_path / "f"), len(data), DataError, "test file") == data
    with pytest.raises(DataError) as raised:
        read_limited(str(tmp_path / "f"), len(data) - 1, DataError, "test file")
    assert str(raised.value) == "%s: larger than 149999 bytes, too large for a test file" % (tmp_path / "f")


def test_a_file_larger_than_its_limit_is_refused_before_it_is_read(tmp_path):
    from bert_whitening.io.bounded import read_limited

    with open(tmp_path / "f", "wb") as stream:
        stream.truncate((32 << 20) + 1)  # sparse
    message = refused_quickly(lambda: read_limited(str(tmp_path / "f"), 32 << 20, DataError, "test file"), DataError)
    assert message == "%s: larger than 33554432 bytes, too large for a test file" % (tmp_path / "f")
    tracemalloc.start()
    try:
        with pytest.raises(DataError):
            read_limited(str(tmp_path / "f"), 32 << 20, DataError, "test file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # nothing of it read


@pytest.mark.parametrize("limit", [100_000, 131_072], ids=["between reads", "at the end of a read"])
def test_a_file_that_grew_past_its_limit_after_it_was_opened_is_refused_when_read(tmp_path, monkeypatch, limit):
    """The size checked on opening is the file's then (here: empty); what is read counts too, a
    piece at a time: no more than the limit and a piece is read."""
    from bert_whitening.io import bounded

    with open(tmp_path / "f", "wb") as stream:
        stream.truncate(64 << 20)  # sparse
    fstat = os.fstat
    monkeypatch.setattr(bounded.os, "fstat", lambda fd: os.stat_result((*fstat(fd)[:6], 0, *fstat(fd)[7:])))
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as raised:
            bounded.read_limited(str(tmp_path / "f"), limit, DataError, "test file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(raised.value) == "%s: larger than %d bytes, too large for a test file" % (tmp_path / "f", limit)
    assert peak < 4 << 20, peak


def test_an_io_error_while_a_file_is_read_whole_names_the_file_and_the_error(tmp_path, monkeypatch):
    from bert_whitening.io import bounded

    class Failing(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(bounded, "open_regular", lambda *args: io.BufferedReader(Failing()))
    with pytest.raises(DataError) as raised:
        bounded.read_limited(str(tmp_path / "f"), 10, DataError, "test file")
    assert str(raised.value) == "%s: cannot read the test file (Input/output error)" % (tmp_path / "f")


def test_a_file_that_cannot_be_opened_is_named_with_why(tmp_path):
    from bert_whitening.io.bounded import open_regular, read_limited

    (tmp_path / "f").write_bytes(b"x")
    for read in (lambda path: open_regular(path, DataError), lambda path: read_limited(path, 10, DataError)):
        with pytest.raises(DataError) as raised:
            read(str(tmp_path / "none"))
        assert str(raised.value) == "%s: no such file" % (tmp_path / "none")
        with pytest.raises(DataError) as raised:
            read(str(tmp_path / "f" / "x"))
        assert str(raised.value) == "%s: cannot read the file (Not a directory)" % (tmp_path / "f" / "x")
    with pytest.raises(DataError) as raised:
        read_limited(str(tmp_path / "none"), 10, DataError, "test file")
    assert str(raised.value) == "%s: no such test file" % (tmp_path / "none")


# --- checkpoint data that cannot hold the variables its index gives ----------------------------


def save_sliced(directory, weights, slices):
    """Replace the checkpoint of ``directory`` by ``weights``, each variable of ``slices`` saved
    as the row ranges ``[(start, length), ...]`` it maps to (TensorFlow's ``shape_and_slices``),
    the others whole."""
    from bert_whitening.backend import tf

    names, specs, tensors = [], [], []
    for name, value in sorted(weights.items()):
        for start, length in slices.get(name, [(0, len(value))]):
            names.append(name)
            rows = "%d,%d" % (start, length) + ":-" * (value.ndim - 1)
            specs.append("" if name not in slices else " ".join(map(str, value.shape)) + " " + rows)
            tensors.append(value[start : start + length])
    for name in os.listdir(directory):
        if name.startswith("bert_model.ckpt."):
            os.remove(os.path.join(directory, name))
    prefix = os.path.join(directory, "bert_model.ckpt")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=specs, tensors=tensors)


def variable_bytes(weights):
    return sum(value.nbytes for value in weights.values())


@pytest.mark.parametrize("kept", [0, 0.5, -4], ids=["emptied", "half", "4 bytes short"])
def test_a_checkpoint_whose_data_is_shorter_than_its_index_says_is_refused_before_the_build(
    model_copy, tiny_model, nothing_built, kept
):
    """A data file emptied or cut (a copy that stopped, a forged index) passed every check of
    the index alone: the model was built, then its first read failed."""
    from bert_whitening.models import build_encoder

    needed = variable_bytes(tiny_model[1])
    data = os.path.join(model_copy, "bert_model.ckpt.data-00000-of-00001")
    assert os.path.getsize(data) == needed
    held = int(needed * kept) if kept >= 0 else needed + kept
    os.truncate(data, held)
    refused_quickly(
        lambda: build_encoder(model_copy),
        CheckpointError,
        "copy/bert_model.ckpt.index: its %d variables take %d bytes, and bert_model.ckpt.data-00000-of-00001 holds "
        "only %d: the data is truncated or not this index's" % (len(tiny_model[1]), needed, held),
    )


def test_the_variables_no_model_uses_count_in_what_the_data_must_hold(model_copy, tiny_model, nothing_built):
    """The data holds every variable of the index, the optimizer's slots as much as the model's."""
    from bert_whitening.models import build_encoder

    embeddings = tiny_model[1]["bert/embeddings/word_embeddings"]
    weights = {**tiny_model[1], "bert/embeddings/word_embeddings/adam_m": embeddings}
    save_sliced(model_copy, weights, {})
    os.truncate(os.path.join(model_copy, "bert_model.ckpt.data-00000-of-00001"), variable_bytes(weights) - 1)
    refused_quickly(lambda: build_encoder(model_copy), CheckpointError, "holds only %d" % (variable_bytes(weights) - 1))


@pytest.mark.parametrize("padded", [False, True], ids=["one row", "one row and bytes enough"])
def test_a_variable_saved_as_slices_that_hold_part_of_it_is_refused_before_the_build(
    model_copy, tiny_model, nothing_built, padded
):
    """A checkpoint whose variables are saved as one row each claims a model its data never held
    (a few MB for GBs of weights): TensorFlow's reader fails on it only when the built model reads
    it. Bytes after the last variable may make up the size: the slices are counted apart."""
    from bert_whitening.models import build_encoder

    embeddings = tiny_model[1]["bert/embeddings/word_embeddings"]
    save_sliced(model_copy, tiny_model[1], {"bert/embeddings/word_embeddings": [(3, 1)]})
    if padded:
        os.truncate(os.path.join(model_copy, "bert_model.ckpt.data-00000-of-00001"), variable_bytes(tiny_model[1]))
    refused_quickly(
        lambda: build_encoder(model_copy),
        CheckpointError,
        "copy/bert_model.ckpt.index: 1 variable is saved as slices that hold part of them "
        "(bert/embeddings/word_embeddings: %d of its %d elements): the checkpoint cannot be read"
        % (embeddings.shape[1], embeddings.size),
    )


def test_a_variable_saved_as_slices_that_cover_it_is_read_whole(model_copy, tiny_model, encoders):
    """TensorFlow's reader puts a partitioned variable back together, for bert4keras' loader and
    FusedBert's alike: slices that cover their variable are no damage."""
    from bert_whitening.encoding import encode
    from bert_whitening.models import build_encoder
    from bert_whitening.names import DEFAULT_POOLING

    from helpers import SENTENCES

    vocab_size = TINY_CONFIG["vocab_size"]
    kernel = "bert/encoder/layer_1/intermediate/dense/kernel"
    slices = {"bert/embeddings/word_embeddings": [(0, 5), (5, vocab_size - 5)], kernel: [(0, 20), (20, 4)]}
    save_sliced(model_copy, tiny_model[1], slices)
    expected = encode(encoders[DEFAULT_POOLING], SENTENCES)
    np.testing.assert_array_equal(encode(build_encoder(model_copy), SENTENCES), expected)  # FusedBert
    set_config(model_copy, hidden_act="relu")  # bert4keras' graph
    assert np.isfinite(encode(build_encoder(model_copy), SENTENCES)).all()


# --- whitening and flow files ------------------------------------------------------------------


@pytest.fixture(scope="module")
def whitening_arrays(tmp_path_factory):
    rng = np.random.default_rng(0)
    whitening = fit_whitening(WhiteningStats().update(rng.normal(size=(100, 16)) @ rng.normal(size=(16, 16))))
    path = str(tmp_path_factory.mktemp("whitening") / "w.npz")
    whitening.save(path)
    with np.load(path) as data:
        return dict(data)


def edited_meta(arrays, **changes):
    """Whitening ``arrays`` with their JSON metadata changed."""
    return {**arrays, "meta": np.array(json.dumps({**json.loads(str(arrays["meta"])), **changes}))}


def npy_header(shape, dtype="<f8"):
    """A ``.npy`` version 1.0 header for ``shape``, as numpy writes it."""
    stream = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(stream, header)
    return stream.getvalue()


def write_npz(path, members, compression=zipfile.ZIP_STORED):
    """An ``.npz`` of ``{name: array or raw bytes}``, written member by member."""
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, value in members.items():
            if isinstance(value, np.ndarray):
                stream = io.BytesIO()
                np.lib.format.write_array(stream, value, allow_pickle=True)
                value = stream.getvalue()
            archive.writestr(name + ".npy", value)


def zip_bomb(path, members, name, header, inflated):
    """``members`` with ``name`` the ``header`` then ``inflated`` zero bytes, deflated: a few
    hundred kilobytes on disk."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for other, value in members.items():
            if other != name:
                stream = io.BytesIO()
                np.lib.format.write_array(stream, value)
                archive.writestr(other + ".npy", stream.getvalue())
        with archive.open(name + ".npy", "w", force_zip64=True) as member:
            member.write(header)
            block = bytes(1 << 20)
            for _ in range(inflated >> 20):
                member.write(block)


def test_a_whitening_member_whose_header_claims_a_huge_shape_is_refused_before_reading(whitening_arrays, tmp_path):
    path = str(tmp_path / "huge.npz")
    write_npz(path, {**whitening_arrays, "kernel": npy_header((10**6, 10**6))})
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, "kernel inflates to")
    shape_and_size = npy_header((10**6, 10**6)) + bytes(64)
    write_npz(path, {**whitening_arrays, "bias": shape_and_size})
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, "bias inflates to")


def test_a_whitening_zip_bomb_is_refused_before_it_is_inflated(whitening_arrays, tmp_path):
    path = str(tmp_path / "bomb.npz")
    inflated = 256 << 20
    # the zip entry says what inflating gives; the header says 16 floats
    zip_bomb(path, whitening_arrays, "bias", npy_header((16,)), inflated)
    assert os.path.getsize(path) < inflated // 100
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, "bias.npy inflates from")
    # both say the same, and the dimension says otherwise
    zip_bomb(path, whitening_arrays, "bias", npy_header((inflated // 8,)), inflated)
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, "bias.npy inflates from")


def test_a_small_whitening_of_a_large_dimension_is_refused_before_its_arrays_are_read(whitening_arrays, tmp_path):
    """A whitening consistent in itself (an identity kernel of dimension 2048, every size
    honest) deflated to a few kilobytes: reading it would allocate hundreds of times the file
    before its dimension could be compared with a model's. Compressed floats as a fit gives them
    still load."""
    dim = 2048
    meta = {**json.loads(str(whitening_arrays["meta"])), "dim": dim, "rank": dim, "n_components": dim, "count": dim + 1}
    crafted = {
        "kernel": np.eye(dim),
        "bias": np.zeros(dim),
        "mean": np.zeros(dim),
        "eigenvalues": np.ones(dim),
        "meta": np.array(json.dumps(meta)),
    }
    path = str(tmp_path / "identity.npz")
    write_npz(path, crafted, zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < dim * dim * 8 // 100
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, "kernel.npy inflates from")
    write_npz(path, crafted)  # stored as numpy writes it: the same arrays load
    assert Whitening.load(path).dim == dim
    write_npz(path, whitening_arrays, zipfile.ZIP_DEFLATED)
    assert np.array_equal(Whitening.load(path).kernel, whitening_arrays["kernel"])


def claim_sizes(path, name, compress_size, file_size):
    """Make the zip central directory of ``path`` claim these sizes for the member ``name``, as a
    crafted file would: its local header and data stay as they were."""
    with open(path, "rb") as stream:
        data = bytearray(stream.read())
    entry = -1
    while True:
        entry = data.find(b"PK\x01\x02", entry + 1)
        assert entry >= 0, name
        length = struct.unpack_from("<H", data, entry + 28)[0]
        if data[entry + 46 : entry + 46 + length] == (name + ".npy").encode():
            break
    struct.pack_into("<II", data, entry + 20, compress_size, file_size)
    with open(path, "wb") as stream:
        stream.write(data)


def test_a_member_claiming_more_stored_bytes_than_the_file_holds_is_refused_before_any_allocation(
    whitening_arrays, tmp_path
):
    """A file of a kilobyte or two whose central directory gives a stored kernel of dimension
    8192 the sizes its header and metadata agree on: nothing of that size is made."""
    dim = 8192
    meta = {**json.loads(str(whitening_arrays["meta"])), "dim": dim, "rank": dim, "n_components": dim, "count": dim + 1}
    path = str(tmp_path / "claims.npz")
    header = npy_header((dim, dim))
    write_npz(path, {**whitening_arrays, "meta": np.array(json.dumps(meta)), "kernel": header + bytes(64)})
    claim_sizes(path, "kernel", len(header) + dim * dim * 8, len(header) + dim * dim * 8)
    assert os.path.getsize(path) < 4096
    refused_quickly(
        lambda: Whitening.load(path),
        WhiteningError,
        "%s: not a whitening file, kernel.npy claims %d stored bytes, the whole file holds %d"
        % (path, len(header) + dim * dim * 8, os.path.getsize(path)),
    )


def test_members_claiming_more_stored_bytes_together_than_the_file_holds_are_refused(whitening_arrays, tmp_path):
    """Each claim within the file, their sum beyond it: members whose bytes overlap."""
    path = str(tmp_path / "overlap.npz")
    write_npz(path, whitening_arrays, zipfile.ZIP_DEFLATED)
    size = os.path.getsize(path)
    with zipfile.ZipFile(path) as archive:
        kernel, bias = archive.getinfo("kernel.npy"), archive.getinfo("bias.npy")
    claim_sizes(path, "bias", size - kernel.compress_size + 1, bias.file_size)
    with zipfile.ZipFile(path) as archive:
        claimed = sum(info.compress_size for info in archive.infolist())
    refused_quickly(
        lambda: Whitening.load(path),
        WhiteningError,
        "%s: not a whitening file, its members claim %d stored bytes together, the whole file holds %d"
        % (path, claimed, size),
    )


def test_a_member_is_read_as_it_arrives_not_into_room_made_for_its_claimed_size(monkeypatch, tmp_path):
    """Inflation bounded far above what a file holds (so that only the reading is tested): a
    member of a hundred kilobytes that claims a hundred megabytes is refused when its data ends,
    having taken the memory of what it held."""
    import bert_whitening.io.bounded as bounded

    monkeypatch.setattr(bounded, "INFLATION_LIMIT", 10**4)
    count = (100 << 20) // 8
    path = str(tmp_path / "cut.npz")
    held = np.random.default_rng(0).normal(size=(100 << 10) // 8)
    write_npz(path, {"a": npy_header((count,)) + held.tobytes()}, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        stored = archive.getinfo("a.npy").compress_size
    claim_sizes(path, "a", stored, len(npy_header((count,))) + count * 8)

    def read():
        with bounded.NpzMembers(path, WhiteningError, "test file") as members:
            members.array("a")

    assert refused_quickly(read, WhiteningError) == "%s: a is not the size its header says" % path


def test_a_member_that_runs_past_the_end_of_the_file_is_named_with_what_went_wrong(tmp_path):
    """Its claimed size within the file's but its data starting late enough to run past the
    end: zipfile's ``EOFError()`` says nothing, the refusal names the member and why."""
    from bert_whitening.io.bounded import NpzMembers

    path = str(tmp_path / "late.npz")
    header = npy_header((1,))
    write_npz(path, {"pad": bytes(4096), "a": header})
    size = os.path.getsize(path)
    with zipfile.ZipFile(path) as archive:
        pad, member = archive.getinfo("pad.npy"), archive.getinfo("a.npy")
    start = member.header_offset + 30 + len(member.filename) + len(member.extra)
    count = (size - start - len(header)) // 8 + 1  # runs past the end by less than a float
    claimed = len(npy_header((count,))) + count * 8
    assert claimed + pad.compress_size <= size < start + claimed
    write_npz(path, {"pad": bytes(4096), "a": npy_header((count,))})
    claim_sizes(path, "a", claimed, claimed)

    def read():
        with NpzMembers(path, WhiteningError, "test file") as members:
            members.array("a")

    assert refused_quickly(read, WhiteningError) == "%s: not a readable test file (a: cut short)" % path


def raw_header(text):
    """A ``.npy`` 1.0 header holding ``text`` as its dictionary, whatever it says."""
    data = text.encode("latin1") + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(data)) + data


def corrupt_deflated(path):
    """``{"a": 1000 floats}`` deflated, the first bytes of its deflate stream broken."""
    write_npz(path, {"a": np.random.default_rng(0).normal(size=1000)}, zipfile.ZIP_DEFLATED)
    with open(path, "r+b") as stream:
        local = stream.read(30)
        stream.seek(30 + sum(struct.unpack_from("<HH", local, 26)))
        stream.write(b"\xff" * 4)


def encrypted(path):
    write_npz(path, {"a": np.zeros(4)})
    with open(path, "r+b") as stream:
        data = bytearray(stream.read())
        entry = data.rfind(b"PK\x01\x02")
        data[entry + 8] |= 1  # "encrypted" in the central directory's flags
        stream.seek(0)
        stream.write(data)


@pytest.mark.parametrize(
    "make, said",
    [
        (corrupt_deflated, "(a: Error -3 while decompressing data"),
        (
            lambda path: write_npz(path, {"a": raw_header("{b'x': 1, 'descr': '<f8', 'shape': (1,)}")}),
            "not a readable test file (a: '<' not supported",
        ),
        (
            lambda path: write_npz(path, {"a": raw_header("{'descr': '<f8', 'shape': (1,")}),
            "not a readable test file (a: ('EOF in multi-line statement'",
        ),
        (encrypted, "(a: File <ZipInfo filename='a.npy'"),
        (lambda path: write_npz(path, {"a\n": np.zeros(4)}), "it holds 'a\\n.npy', which is not an array"),
    ],
    ids=["broken deflate stream", "header keys of two types", "header cut short", "encrypted", "line end in name"],
)
def test_a_damaged_member_is_one_line_naming_the_file_and_the_member(tmp_path, make, said):
    from bert_whitening.io.bounded import NpzMembers

    path = str(tmp_path / "damaged.npz")
    make(path)

    def read():
        with NpzMembers(path, WhiteningError, "test file") as members:
            members.expect({"a"})
            members.array("a")

    refused_quickly(read, WhiteningError, path, said)


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda arrays: {**arrays, "junk": np.zeros(3)}, "not a whitening file, unexpected arrays junk"),
        (  # a superscript two is a digit to str.isdigit, not to int: named, not a traceback
            lambda arrays: {**arrays, "²": np.zeros(3), "a10": np.zeros(3), "a9": np.zeros(3)},
            "unexpected arrays a9, a10, ²",
        ),
        (
            lambda arrays: {**arrays, "kernel": np.array([{"a": 1}], dtype=object)},
            "kernel holds Python objects, which are never read",
        ),
        (lambda arrays: {**arrays, "meta": np.array("x" * (2 << 20))}, "meta holds 8388608 bytes, more than"),
        (lambda arrays: {**arrays, "bias": arrays["bias"].astype(np.int64)}, "bias holds int64, expected floats"),
        (lambda arrays: edited_meta(arrays, dim=10**6), "inconsistent metadata (dim 1000000"),
        (lambda arrays: edited_meta(arrays, count=1), "inconsistent metadata (dim 16, rank 16, count 1,"),
        (lambda arrays: edited_meta(arrays, count=10), "inconsistent metadata (dim 16, rank 16, count 10,"),
        (lambda arrays: edited_meta(arrays, rank=0), "inconsistent metadata (dim 16, rank 0, count 100,"),
    ],
)
def test_a_whitening_file_is_read_only_as_its_expected_members(whitening_arrays, tmp_path, change, said):
    path = str(tmp_path / "changed.npz")
    write_npz(path, change(whitening_arrays))
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, said)


@pytest.mark.parametrize("make, said", [(fifo, "a FIFO, not a regular file"), (dev_zero, "a character device")])
def test_a_whitening_file_that_is_a_fifo_or_a_device_is_refused(whitening_arrays, tmp_path, make, said):
    path = str(tmp_path / "w.npz")
    write_npz(path, whitening_arrays)
    make(path)
    refused_quickly(lambda: Whitening.load(path), WhiteningError, path, said)


def test_a_whitening_path_that_is_no_file_is_named_as_a_whitening_file(tmp_path):
    with pytest.raises(WhiteningError) as raised:
        Whitening.load(str(tmp_path / "none.npz"))
    assert str(raised.value) == "%s: no such whitening file" % (tmp_path / "none.npz")
    with pytest.raises(WhiteningError) as raised:
        Whitening.load(str(tmp_path))
    assert str(raised.value) == "%s: a directory, not a regular file: cannot be read as a whitening file" % tmp_path


def duplicated(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name"
        write_npz(path, {"a": np.zeros(4)})
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr("a.npy", b"again")


def deflated_zeros(path, inflated):
    """``{"a": zeros}`` deflated, the member ``inflated`` bytes with its header."""
    write_npz(path, {"a": np.zeros((inflated - 128) // 8)}, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("a.npy")
    assert info.file_size == inflated
    return info.compress_size


@pytest.mark.parametrize(
    "make, read, said",
    [
        (duplicated, lambda members: None, "{path}: not a test file, it holds a.npy twice"),
        (
            lambda path: write_npz(path, {"a": np.zeros(4)}),
            lambda members: members.expect({"a", "b", "c", "d"}),
            "{path}: not a test file, missing b, c, d",
        ),
        (
            lambda path: write_npz(path, {"a\n": np.zeros(4)}),
            lambda members: None,
            "{path}: not a test file, it holds 'a\\n.npy', which is not an array",
        ),
        (
            lambda path: write_npz(path, {"a": np.array(["x"])}),
            lambda members: members.array("a", kinds="fi"),
            "{path}: a holds <U1, expected floats or integers",
        ),
        (
            lambda path: write_npz(path, {"a": np.array([{}], dtype=object)}),
            lambda members: members.array("a"),
            "{path}: a holds Python objects, which are never read",
        ),
        (
            lambda path: write_npz(path, {"a": np.zeros(4)}),
            lambda members: members.array("a", limit=31),
            "{path}: a holds 32 bytes, more than the 31 a test file holds",
        ),
        (
            lambda path: write_npz(path, {"a": npy_header((4,)) + bytes(40)}),
            lambda members: members.array("a"),
            "{path}: a inflates to 168 bytes, its header (shape (4,) of float64) says 160",
        ),
        (
            lambda path: deflated_zeros(path, (1 << 20) + 128),
            lambda members: None,
            "{path}: not a test file, a.npy inflates from {stored} to 1048704 bytes, more than 4 times: crafted, "
            "not written by bert-whitening",
        ),
        (
            lambda path: write_npz(path, {"a%d" % i: np.zeros(1) for i in range(1, 6)}),
            lambda members: members.expect(set()),
            "{path}: not a test file, unexpected arrays a1, a2, a3 and 2 more",
        ),
    ],
    ids=["twice", "three missing", "line end in name", "text", "objects", "beyond limit", "longer", "bomb", "five"],
)
def test_each_refusal_of_an_npz_member_is_its_one_exact_line(tmp_path, make, read, said):
    from bert_whitening.io.bounded import NpzMembers

    path = str(tmp_path / "a.npz")
    stored = make(path)

    def opened():
        with NpzMembers(path, WhiteningError, "test file") as members:
            read(members)

    assert refused_quickly(opened, WhiteningError) == said.format(path=path, stored=stored)


def test_a_member_at_each_bound_is_read(tmp_path):
    """Inflated to exactly the size exempt from the inflation bound, and holding exactly the
    bytes its limit allows."""
    from bert_whitening.io.bounded import INFLATION_EXEMPT_BYTES, NpzMembers

    path = str(tmp_path / "a.npz")
    stored = deflated_zeros(path, INFLATION_EXEMPT_BYTES)
    assert INFLATION_EXEMPT_BYTES > 4 * stored
    with NpzMembers(path, WhiteningError, "test file") as members:
        array = members.array("a", limit=INFLATION_EXEMPT_BYTES - 128)
    assert array.shape == ((INFLATION_EXEMPT_BYTES - 128) // 8,) and not array.any()


def test_what_an_error_says_is_never_empty():
    from bert_whitening.io.bounded import described

    assert described(ValueError("bad header")) == "bad header"
    assert described(EOFError()) == "cut short"
    assert described(zipfile.BadZipFile()) == "BadZipFile"


@pytest.mark.parametrize(
    "config, said",
    [
        ({"depth": 10**6}, "flow depth is 1000000, expected a whole number from 1 to 64"),
        ({"coupling_width": 10**7}, "flow coupling_width is 10000000"),
        ({"n_levels": "3"}, "flow n_levels is '3'"),
        ({"n_levels": 17}, "flow n_levels is 17"),
        ({"permutation": "false"}, "flow permutation must be True or False, got str 'false'"),
        ({"coupling": ["additive"]}, "flow coupling must be additive or affine, got ['additive']"),
    ],
)
def test_a_flow_config_beyond_the_bounds_is_refused(config, said):
    from bert_whitening.flow import FlowConfig

    refused_quickly(lambda: FlowConfig.of(config), FlowError, said)


@pytest.mark.parametrize(
    "dim, config, said",
    [
        (8192, {"permutation": False}, "would hold"),
        (4096, {"coupling_width": 4096, "depth": 64}, "would hold"),
        (10**6, None, "a flow's dimension is 1000000"),
    ],
)
def test_a_flow_larger_than_the_bound_is_refused_before_a_weight_is_made(monkeypatch, dim, config, said):
    import bert_whitening.flow as flow

    def made(*args, **kwargs):
        raise AssertionError("a flow layer was made before the refusal")

    monkeypatch.setattr(flow, "ActNorm", made)
    refused_quickly(lambda: flow.Flow(dim, config), FlowError, said)


@pytest.mark.parametrize(
    "dim, config",
    [
        (16, {}),
        (32, {"permutation": False, "n_levels": 2}),
        (64, {"coupling": "affine", "coupling_width": 8, "depth": 2}),
        (24, {"permutation": False, "coupling": "affine", "n_levels": 1}),
    ],
)
def test_the_size_of_a_flow_is_counted_as_its_layers_make_it(dim, config):
    from bert_whitening.flow import Flow, FlowConfig

    flow = Flow(dim, config)
    assert FlowConfig.of(config).weight_shapes(dim) == [tuple(weight.shape) for weight in flow.weights]
    assert FlowConfig.of(config).weight_count(dim) == sum(int(np.prod(weight.shape)) for weight in flow.weights)
    assert 8 * FlowConfig.of(config).weight_count(dim) < FLOW_BYTES


def test_a_flow_of_the_largest_shape_holds_as_many_arrays_as_a_flow_file_is_bounded_by():
    """`FLOW_FILE_BYTES` counts the arrays of the largest flow (an index's flow.npz is read whole)."""
    from bert_whitening.flow import FlowConfig

    largest = FlowConfig.of({**FLOW_SIZES, "permutation": False, "coupling": "affine"})
    steps = FLOW_SIZES["n_levels"] * FLOW_SIZES["depth"]
    assert len(largest.weight_shapes(1 << FLOW_SIZES["n_levels"])) == steps * FLOW_WEIGHTS_PER_STEP


@pytest.fixture(scope="module")
def flow_arrays(tmp_path_factory):
    from bert_whitening.flow import Flow

    path = str(tmp_path_factory.mktemp("flow") / "f.npz")
    Flow(16, {"n_levels": 2, "depth": 1}).save(path)
    with np.load(path) as data:
        return dict(data)


def with_meta(arrays, **changes):
    return {**arrays, "meta": np.array(json.dumps({**json.loads(str(arrays["meta"])), **changes}))}


def meta_alone(arrays, **changes):
    """A flow file holding only its metadata (changed), as a crafted one would."""
    return {"meta": with_meta(arrays, **changes)["meta"]}


#: A summary as `fit_flow` writes it.
TRAINING = {
    "seed": 0,
    "vectors": 128,
    "epochs": 1,
    "batch_size": 64,
    "learning_rate": 0.001,
    "steps": 2,
    "seconds": 0.5,
    "nll_first_steps": 1.5,
    "nll_last_steps": 1.25,
}


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda arrays: with_meta(arrays, dim=10**6), "a flow's dimension is 1000000"),
        (lambda arrays: with_meta(arrays, config={"depth": 10**6}), "flow depth is 1000000"),
        (lambda arrays: with_meta(arrays, config={"permutation": False}, dim=8192), "would hold"),
        (lambda arrays: {**arrays, "weight_000": npy_header((10**6,)) + bytes(8)}, "weight_000 inflates to"),
        (lambda arrays: {**arrays, "weight_000": np.zeros(10**4)}, "weight_000 has shape (10000,), expected (16,)"),
        (lambda arrays: {**arrays, "weight_999": np.zeros(2)}, "unexpected arrays weight_999"),
        (  # a kilobyte, a flow of 2048 dimensions to build (hundreds of MB and seconds of QR and LU)
            lambda arrays: meta_alone(
                arrays, dim=2048, config={"n_levels": 1, "depth": 2, "permutation": False}, training={}
            ),
            "not a flow file, missing weight_000, weight_001, weight_002 and 29 more",
        ),
        (lambda arrays: {**arrays, "weight_002": np.zeros((8, 31))}, "weight_002 has shape (8, 31), expected (8, 32)"),
        (lambda arrays: with_meta(arrays, training="x"), "training is str 'x', expected the summary fit_flow"),
        (lambda arrays: with_meta(arrays, training=[1, 2]), "training is list [1, 2], expected the summary"),
        (lambda arrays: with_meta(arrays, training={"steps": 3}), "training lacks seed, vectors, epochs and 5 more"),
        (lambda arrays: with_meta(arrays, training={**TRAINING, 7: 1}), "training holds '7', which fit_flow never"),
        (
            lambda arrays: with_meta(arrays, training={**TRAINING, "steps": "3"}),
            "training steps is str '3', expected int",
        ),
        (lambda arrays: with_meta(arrays, training={**TRAINING, "seed": True}), "training seed is bool True"),
        (
            lambda arrays: with_meta(arrays, config={"n_levels": 2, "depth": 1, "permutation": "false"}),
            "flow permutation must be True or False, got str 'false'",
        ),
    ],
)
def test_a_flow_file_is_sized_before_it_is_built_and_read(flow_arrays, tmp_path, monkeypatch, change, said):
    import bert_whitening.flow as flow

    def made(*args, **kwargs):
        raise AssertionError("a flow layer was made before the refusal")

    path = str(tmp_path / "changed.npz")
    write_npz(path, change(flow_arrays))
    monkeypatch.setattr(flow, "ActNorm", made)
    refused_quickly(lambda: flow.Flow.load(path), FlowError, path, said)


def test_a_flow_file_of_a_summary_fit_flow_writes_loads(flow_arrays, tmp_path):
    from bert_whitening.flow import Flow

    path = str(tmp_path / "trained.npz")
    write_npz(path, with_meta(flow_arrays, training=TRAINING))
    assert Flow.load(path).training_summary == TRAINING


# --- .npy matrices (update_from_npy, index --from-vectors) ------------------------------------


def saved(path, array):
    np.save(path, array)
    return str(path)


def test_a_npy_file_cut_short_between_blocks_is_refused_naming_the_row(tmp_path):
    """It once was numpy's ``mmap length is greater than file size``, naming no file."""
    path = saved(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32))
    offset = os.path.getsize(path) - 100 * 8 * 4
    blocks = npy_blocks(path, 10)
    next(blocks)
    os.truncate(path, offset + 30 * 8 * 4 + 12)  # within row 31
    with pytest.raises(DataError) as raised:
        list(blocks)
    assert str(raised.value) == (
        "%s: ends within row 31 (counted from 1) of the 100 rows its header declares: it was cut short while read"
        % path
    )


def test_a_block_stays_what_was_read_when_the_file_is_cut_short_meanwhile(tmp_path):
    """A mapped block whose pages the file no longer holds killed the process (SIGBUS), or read
    as zeros: in a child process, so that such a death fails the test rather than the run."""
    path = saved(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(1000, 256)).astype(np.float32))
    script = (
        "import os, sys, numpy as np\n"
        "from bert_whitening.io.files import npy_blocks\n"
        "path = sys.argv[1]\n"
        "expected = np.load(path)[:500].astype(np.float64).sum()\n"
        "_, block = next(npy_blocks(path, 500))\n"
        "os.truncate(path, 64)\n"
        "assert block.astype(np.float64).sum() == expected, 'the block changed'\n"
    )
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])


@pytest.mark.parametrize(
    "make, said",
    [
        (  # a header that says fewer rows than the file holds: read as 5 rows once
            lambda path: write_npy(path, {"descr": "<f4", "fortran_order": False, "shape": (5, 8)}, bytes(320)),
            "160 bytes after the 5 rows its header declares: not the array its header says",
        ),
        (
            lambda path: open(saved(path, np.ones((10, 8), np.float32)), "ab").write(bytes(7)),
            "7 bytes after the 10 rows its header declares: not the array its header says",
        ),
        (
            lambda path: write_npy(path, {"descr": "<f4", "fortran_order": False, "shape": (1000, 8)}, bytes(330)),
            "ends within row 11 (counted from 1) of the 1000 rows its header declares: cut short",
        ),
    ],
    ids=["header of fewer rows", "trailing zero bytes", "header of more rows"],
)
def test_a_npy_file_must_hold_exactly_the_array_its_header_declares(tmp_path, make, said):
    path = str(tmp_path / "v.npy")
    make(path)
    with pytest.raises(DataError) as raised:
        WhiteningStats().update_from_npy(path)
    assert str(raised.value) == "%s: %s" % (path, said)


def write_npy(path, header, data):
    with open(path, "wb") as stream:
        np.lib.format.write_array_header_1_0(stream, header)
        stream.write(data)


def test_a_npy_file_that_grows_while_read_is_refused_after_its_last_row(tmp_path):
    path = saved(tmp_path / "v.npy", np.ones((30, 8), np.float32))
    blocks = npy_blocks(path, 10)
    next(blocks)
    with open(path, "ab") as stream:
        stream.write(bytes(32))
    with pytest.raises(DataError, match="^%s: 32 bytes after the 30 rows its header declares" % path):
        list(blocks)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(80, dtype=">f4").reshape(10, 8),  # big-endian
        np.arange(80, dtype=np.float16).reshape(10, 8),
        np.asfortranarray(np.arange(10, dtype=np.float64).reshape(10, 1)),  # one column: C order's bytes
        np.asfortranarray(np.arange(8, dtype=np.float64).reshape(1, 8)),
        np.zeros((0, 8), np.float32),
    ],
    ids=["big-endian", "float16", "Fortran column", "Fortran row", "no rows"],
)
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_a_npy_matrix_is_read_as_numpy_reads_it(tmp_path, array, version):
    path = str(tmp_path / "v.npy")
    with open(path, "wb") as stream:
        np.lib.format.write_array(stream, array, version)
    blocks = list(npy_blocks(path, 3))
    assert [first for first, _ in blocks] == list(range(0, len(array), 3))
    assert all(block.dtype == array.dtype for _, block in blocks)  # concatenating would make it native
    read = np.concatenate([block for _, block in blocks]) if blocks else np.zeros((0, 8))
    assert np.array_equal(read, np.load(path))


def npy_of_header(version, length, shape=(2, 3)):
    """A ``.npy`` of ``version`` (1.0, 2.0 or 3.0) holding ``shape`` float32 zeros, its header
    padded with spaces to ``length`` bytes, the most numpy reads being 10000."""
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (shape,)
    header = (text + " " * (length - len(text) - 1) + "\n").encode("latin1")
    width = "<H" if version == (1, 0) else "<I"
    magic = b"\x93NUMPY" + bytes(version)
    return magic + struct.pack(width, length) + header + bytes(4 * max(int(np.prod(shape)), 0))


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_a_npy_header_of_the_longest_length_numpy_reads_is_read_and_a_longer_one_refused_unread(tmp_path, version):
    """numpy read as many bytes as a 2.0 header claimed (up to 4 GB) before comparing them with
    its limit, and then refused in three lines of advice to trust the file."""
    path = tmp_path / "v.npy"
    path.write_bytes(npy_of_header(version, 10000))
    assert [(first, block.tolist()) for first, block in npy_blocks(str(path), 5)] == [(0, [[0.0] * 3] * 2)]
    path.write_bytes(npy_of_header(version, 10001))
    with pytest.raises(DataError) as raised:
        list(npy_blocks(str(path), 5))
    assert str(raised.value) == (
        "%s: not a readable .npy array (a .npy header of 10001 bytes, more than the 10000 numpy reads)" % path
    )
    if version == (2, 0):  # a header of 4 GB claimed by a file of as much, sparse
        with open(path, "wb") as stream:
            stream.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", (1 << 32) - 1))
            stream.truncate(1 << 32)
        refused_quickly(lambda: list(npy_blocks(str(path), 5)), DataError, "a .npy header of 4294967295 bytes")


@pytest.mark.parametrize(
    "data, said",
    [
        (b"\x93NUMPY\x04\x00" + bytes(60), ".npy format version 4.0"),
        (
            npy_of_header((3, 0), 118).replace(b"'descr'", "'dèscr'".encode()),
            "a .npy 3.0 header beyond ASCII (field names of a structured array)",
        ),
        (npy_of_header((1, 0), 118, shape=(-1, 3)), "a negative size in its shape (-1, 3)"),
    ],
    ids=["version 4.0", "3.0 beyond ASCII", "negative size"],
)
def test_a_npy_header_numpy_would_misread_is_refused_saying_what_it_holds(tmp_path, data, said):
    path = tmp_path / "v.npy"
    path.write_bytes(data)
    with pytest.raises(DataError) as raised:
        list(npy_blocks(str(path), 5))
    assert str(raised.value) == "%s: not a readable .npy array (%s)" % (path, said)


def test_rows_written_as_they_arrive_are_the_array_numpy_and_npy_blocks_read(tmp_path):
    from bert_whitening.io.npy_rows import NpyRowWriter

    rows = np.random.default_rng(0).normal(size=(7, 5))
    path = str(tmp_path / "v.npy")
    with NpyRowWriter(path, 5) as out:
        out.append(rows[:3])
        out.append(rows[3:3])
        out.append(rows[3:].tolist())
        assert out.rows == 7
    assert os.path.getsize(path) == 128 + 7 * 5 * 4  # a 64-byte aligned header, then the rows
    with open(path, "rb") as stream:
        assert np.lib.format.read_magic(stream) == (1, 0)
        assert np.lib.format.read_array_header_1_0(stream) == ((7, 5), False, np.dtype("<f4"))
        assert stream.tell() == 128
    assert np.array_equal(np.load(path), rows.astype(np.float32))
    assert [(first, block.tolist()) for first, block in npy_blocks(path, 4)] == [
        (0, rows[:4].astype(np.float32).tolist()),
        (4, rows[4:].astype(np.float32).tolist()),
    ]
    with NpyRowWriter(path, 5):
        pass
    assert np.load(path).shape == (0, 5)


def test_rows_of_another_width_a_writer_that_failed_or_a_file_cut_short_are_refused(tmp_path):
    from bert_whitening.io.npy_rows import NpyRowWriter

    path = str(tmp_path / "v.npy")
    with pytest.raises(KeyError):
        with NpyRowWriter(path, 5) as out:
            for shape in [(2, 4), (5,), (1, 2, 5)]:
                with pytest.raises(ValueError) as raised:
                    out.append(np.zeros(shape))
                assert str(raised.value) == "expected rows of dimension 5, got shape %s" % (shape,)
            out.append(np.ones((2, 5)))
            raise KeyError("the input failed")
    with pytest.raises(DataError, match="not a .npy file"):  # no header: not an array
        list(npy_blocks(path, 4))
    out = NpyRowWriter(path, 5)
    out.append(np.ones((1000, 5)))  # more than the stream's buffer: written
    os.truncate(path, 1000)
    with pytest.raises(OSError) as raised:
        out.close()
    assert str(raised.value) == "%s has 1000 bytes, expected 20128 for 1000 rows" % path


def test_a_row_file_another_writer_added_to_meanwhile_is_refused_when_closed(tmp_path):
    """Only a file cut short was refused: bytes added after the rows made a file whose header
    declares fewer rows than it holds."""
    from bert_whitening.io.npy_rows import NpyRowWriter

    path = str(tmp_path / "v.npy")
    out = NpyRowWriter(path, 5)
    out.append(np.ones((1000, 5)))  # more than the stream's buffer: written
    with open(path, "ab") as other:
        other.write(bytes(7))
    with pytest.raises(OSError) as raised:
        out.close()
    assert str(raised.value) == "%s has %d bytes, expected %d for 1000 rows" % (path, 128 + 20000 + 7, 128 + 20000)


@pytest.mark.parametrize(
    "shape, refused", [((1, 8), False), ((10, 1), False), ((3, 4), True)], ids=["one row", "one column", "matrix"]
)
def test_a_npy_header_in_fortran_order_is_read_only_for_one_row_or_column(tmp_path, shape, refused):
    """numpy writes such a row or column in C order; a header may still say Fortran's."""
    path = str(tmp_path / "v.npy")
    write_npy(path, {"descr": "<f4", "fortran_order": True, "shape": shape}, np.arange(np.prod(shape), dtype="<f4"))
    if refused:
        with pytest.raises(DataError) as raised:
            list(npy_blocks(path, 5))
        assert str(raised.value) == (
            "%s: expected a 2-D C-ordered array of vectors, got shape (3, 4) in Fortran order" % path
        )
    else:
        read = np.concatenate([block for _, block in npy_blocks(path, 5)])
        assert read.tolist() == np.arange(np.prod(shape), dtype="<f4").reshape(shape).tolist()


def test_a_npy_file_is_read_as_vectors_only_of_floats_as_wide_as_a_hidden_size(tmp_path):
    path = str(tmp_path / "v.npy")
    np.save(path, np.ones((2, MODEL_SIZES["hidden_size"]), np.float32))
    assert [(first, block.shape) for first, block in npy_blocks(path, 5)] == [(0, (2, 8192))]
    np.save(path, np.ones((2, 3), np.int32))
    with pytest.raises(DataError) as raised:
        list(npy_blocks(path, 5))
    assert str(raised.value) == "%s: holds int32, expected floating-point vectors" % path
    with pytest.raises(DataError) as raised:
        list(npy_blocks(str(tmp_path / "none.npy"), 5))
    assert str(raised.value) == "%s: no such .npy file" % (tmp_path / "none.npy")


@pytest.mark.parametrize(
    "array, said",
    [
        (np.ones((2, 3), np.complex64), "holds complex64, expected floating-point vectors"),
        (
            np.ones((3, 0), np.float32),
            "expected a 2-D array of vectors (one a row, at least one column), got shape (3, 0)",
        ),
        (np.ones(5, np.float32), "expected a 2-D array of vectors (one a row, at least one column), got shape (5,)"),
        (
            np.ones((2, 3, 4), np.float32),
            "expected a 2-D array of vectors (one a row, at least one column), got shape (2, 3, 4)",
        ),
    ],
    ids=["complex", "no columns", "1-D", "3-D"],
)
def test_a_npy_array_that_is_not_a_matrix_of_real_vectors_is_refused_saying_what_it_holds(tmp_path, array, said):
    """Complex numbers would lose their imaginary parts; rows of no columns divided by zero; a
    3-D array was refused as bytes after its rows, not for its shape."""
    path = saved(tmp_path / "v.npy", array)
    with pytest.raises(DataError) as raised:
        list(npy_blocks(path, 5))
    assert str(raised.value) == "%s: %s" % (path, said)


def test_a_file_that_is_not_a_npy_array_or_a_count_of_rows_that_is_not_one_is_refused(tmp_path):
    from bert_whitening.errors import BertWhiteningError

    path = tmp_path / "v.npy"
    path.write_bytes(b"PK\x03\x04 a zip, not an array")
    with pytest.raises(DataError) as raised:
        list(npy_blocks(str(path), 5))
    assert str(raised.value) == "%s: not a .npy file (it does not start with the .npy magic string)" % path
    for rows, shown in ((0, "0"), (2.0, "2.0")):  # refused before the file is looked at
        with pytest.raises(BertWhiteningError) as raised:
            list(npy_blocks(str(tmp_path / "none.npy"), rows))
        assert str(raised.value) == "rows must be a positive integer, got %s" % shown


def test_a_npy_file_cut_short_rows_into_a_block_is_refused_naming_the_row(tmp_path):
    path = saved(tmp_path / "v.npy", np.ones((100, 8), np.float32))
    offset = os.path.getsize(path) - 100 * 8 * 4
    blocks = npy_blocks(path, 10)
    next(blocks)
    os.truncate(path, offset + 32 * 8 * 4 + 12)  # within row 33, the block of rows 31-40
    with pytest.raises(DataError) as raised:
        list(blocks)
    assert str(raised.value) == (
        "%s: ends within row 33 (counted from 1) of the 100 rows its header declares: it was cut short while read"
        % path
    )


def test_an_io_error_while_a_npy_file_is_read_names_the_file_and_the_error(tmp_path, monkeypatch):
    from bert_whitening.io import files

    path = saved(tmp_path / "v.npy", np.ones((3, 2), np.float32))

    def failing(*args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files.os, "preadv", failing)
    with pytest.raises(DataError) as raised:
        list(npy_blocks(path, 5))
    assert str(raised.value) == "%s: cannot read the .npy file (Input/output error)" % path
    monkeypatch.setattr(files, "npy_header", failing)
    with pytest.raises(DataError) as raised:
        list(npy_blocks(path, 5))
    assert str(raised.value) == "%s: cannot read the .npy file (Input/output error)" % path


def test_a_large_npy_file_is_read_in_the_memory_of_a_block(tmp_path):
    path = saved(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(100_000, 32)).astype(np.float32))
    tracemalloc.start()
    try:
        stats = WhiteningStats().update_from_npy(path, rows=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.count == 100_000
    assert peak < 4 * 1000 * 32 * 8 + (1 << 20), peak  # a block and its float64 copy, not the file's 12.8 MB


def test_a_npy_header_of_rows_wider_than_any_vector_is_refused_before_a_block_is_read(tmp_path, monkeypatch):
    """Its one row of 2**31 columns was allocated whole before its width was compared with anything."""
    from bert_whitening.io import files

    path, width = str(tmp_path / "v.npy"), MODEL_SIZES["hidden_size"] + 1
    with open(path, "wb") as stream:  # the size its header says, sparse
        np.lib.format.write_array_header_1_0(stream, {"descr": "<f4", "fortran_order": False, "shape": (2, width)})
        stream.truncate(stream.tell() + 2 * width * 4)
    monkeypatch.setattr(files, "_read_into", lambda *args: pytest.fail("a block was read"))
    with pytest.raises(DataError) as raised:
        WhiteningStats().update_from_npy(path)
    assert str(
        raised.value
    ) == "%s: rows of %d numbers, wider than any vector (a model's hidden size is at most %d)" % (
        path,
        width,
        MODEL_SIZES["hidden_size"],
    )


def test_a_npy_block_holds_at_most_its_bytes_whatever_rows_are_asked_for(tmp_path, monkeypatch):
    """Rows of the widest vectors in the widest floats, a caller's block of rows took gigabytes."""
    from bert_whitening.io import files

    array = np.arange(80, dtype=np.float32).reshape(10, 8)
    monkeypatch.setattr(files, "NPY_BLOCK_BYTES", 3 * array[0].nbytes + 5)
    blocks = list(npy_blocks(saved(tmp_path / "v.npy", array), 1000))
    assert [(first, len(block)) for first, block in blocks] == [(0, 3), (3, 3), (6, 3), (9, 1)]
    assert np.array_equal(np.concatenate([block for _, block in blocks]), array)


# --- input lines -------------------------------------------------------------------------------


def long_line_file(path, reader_name):
    """A file whose line 2 is one byte above the limit, in the format ``reader_name`` reads."""
    line = "好" * (LINE_BYTES // 3) + "ab"  # LINE_BYTES + 1 bytes of UTF-8 text (LINE_BYTES = 3k + 1)
    assert len(line.encode("utf-8")) == LINE_BYTES + 1
    if reader_name == "pairs":
        first, second = "a\tb\t1\n", "a\t%s\t1\n" % line
    else:
        first, second = "a sentence\n", line + "\n"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as stream:
        stream.write(first + second + first)


READERS = {"sentences": lambda path: list(read_sentences(path, "lines")), "pairs": lambda path: list(read_pairs(path))}


@pytest.mark.parametrize("reader_name", list(READERS))
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_an_input_line_above_the_limit_is_refused_by_file_and_line(tmp_path, reader_name, suffix):
    path = str(tmp_path / ("input" + suffix))
    long_line_file(path, reader_name)
    refused_quickly(
        lambda: READERS[reader_name](path), DataError, "%s:2: a line longer than %d bytes" % (path, LINE_BYTES)
    )


def test_a_line_at_the_limit_is_read_with_its_line_end(tmp_path):
    path = tmp_path / "at.txt"
    line = "x" * LINE_BYTES
    path.write_bytes(line.encode() + b"\r\n" + line.encode())
    assert list(read_sentences(str(path), "lines")) == [line, line]


def test_standard_input_is_read_with_the_same_limit(tmp_path, monkeypatch):
    import sys

    path = str(tmp_path / "stdin.txt")
    long_line_file(path, "sentences")
    with open(path, "rb") as stream:
        monkeypatch.setattr(sys, "stdin", stream)
        refused_quickly(lambda: list(read_sentences("-", "auto")), DataError, "standard input:2: a line longer than")


@pytest.mark.parametrize("source", ["/dev/zero", "gzip bomb"])
def test_an_endless_line_is_refused_in_bounded_time_and_memory(tmp_path, source):
    path = source
    if source == "gzip bomb":
        path = str(tmp_path / "bomb.txt.gz")
        with gzip.open(path, "wb") as stream:
            for _ in range(256):
                stream.write(b"\0" * (1 << 20))
        assert os.path.getsize(path) < 1 << 20
    refused_quickly(lambda: list(read_sentences(path, "auto")), DataError, "%s:1: a line longer than" % path)


def test_a_long_line_is_one_line_of_the_encode_command(work_model, tmp_path):
    path = str(tmp_path / "input.txt")
    long_line_file(path, "sentences")
    result = here("encode", "--model", work_model, "--output", tmp_path / "v.npy", path)

    refused(result, "%s:2: a line longer than %d bytes" % (path, LINE_BYTES))
    assert not os.path.exists(tmp_path / "v.npy")


@pytest.fixture
def work_model(tiny_model):
    return tiny_model[0]


def test_a_saved_encoder_record_too_large_or_a_fifo_is_refused(tmp_path):
    from bert_whitening import SentenceEncoder
    from bert_whitening.errors import BertWhiteningError

    directory = tmp_path / "encoder"
    directory.mkdir()
    record = directory / "sentence_encoder.json"
    record.write_bytes(b"")
    sparse((1 << 20) + 1)(record)
    refused_quickly(lambda: SentenceEncoder.load(str(directory)), BertWhiteningError, "larger than 1048576 bytes")
    fifo(record)
    refused_quickly(lambda: SentenceEncoder.load(str(directory)), BertWhiteningError, "a FIFO, not a regular file")
