"""One encoder record: what the whitening file, the index and the export say made their vectors,
written and compared by `EncoderConfig`, and readable by the previous version."""

import dataclasses
import json
import os
import pathlib

import numpy as np
import pytest

from bert_whitening.config import EncoderConfig, whitening_digest
from bert_whitening.errors import BertWhiteningError
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import TINY_CONFIG


@pytest.fixture(scope="module")
def whitening():
    vectors = np.random.default_rng(0).normal(size=(80, 24))
    return fit_whitening(WhiteningStats().update(vectors), pooling="first-last-avg")


def test_a_record_round_trips_and_compares_equal(tiny_model, whitening, tmp_path):
    path = tmp_path / "w.npz"
    whitening.save(str(path))
    config = EncoderConfig(
        tiny_model[0], whitening=whitening, n_components=8, normalize=True, whitening_path=str(path), maxlen=32
    )
    record = json.loads(json.dumps(config.to_config()))
    again = EncoderConfig.from_config(record, whitening)
    assert again.to_config() == config.to_config() and config.differences(record) == []
    assert (again.maxlen, again.n_components, again.whitening_path) == (32, 8, str(path))


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(maxlen=16), "maxlen"),
        (dict(lowercase=False), "lowercase"),
        (dict(pooling="cls"), "pooling"),
        (dict(n_components=4), "n_components"),
        (dict(normalize=False), "normalize"),
        (dict(whitening=None, n_components=None), "whitening"),
    ],
)
def test_every_field_that_changes_the_vectors_is_compared(tiny_model, whitening, change, field):
    config = EncoderConfig(
        tiny_model[0], whitening=dataclasses.replace(whitening, pooling=""), n_components=8, normalize=True
    )
    other = dataclasses.replace(config, **change)
    found = config.differences(other.to_config())
    assert [line.split(":")[0] for line in found][:1] == [field]


def test_another_model_or_flow_differs_and_an_unidentified_whitening_is_not_the_same(tiny_model, whitening, tmp_path):
    """The model by its content (a configuration edited, as in another hidden_act), a flow by its
    digest, and a recorded whitening with neither a digest nor a file sha256 is not taken for
    this one: nothing says it is."""
    import shutil

    from bert_whitening.checkpoints import find_model
    from bert_whitening.flow import Flow

    edited = tmp_path / "edited_bert"
    shutil.copytree(tiny_model[0], edited)
    (edited / "bert_config.json").write_text(json.dumps({**TINY_CONFIG, "hidden_act": "relu"}), encoding="utf-8")
    plain = EncoderConfig(tiny_model[0])
    assert [line.split(":")[0] for line in plain.differences(EncoderConfig(str(edited)).to_config())] == ["model"]
    identity = find_model(tiny_model[0]).identity("bert")
    flows = [Flow(24, {"n_levels": 1, "depth": 1, "coupling_width": width}) for width in (8, 16)]
    for flow in flows:
        flow.pooling, flow.model_identity = plain.pooling, identity
    with_flow = dataclasses.replace(plain, flow=flows[0])
    for other in (dataclasses.replace(plain, flow=flows[1]), plain):
        assert [line.split(":")[0] for line in with_flow.differences(other.to_config())] == ["flow"]
    whitened = EncoderConfig(tiny_model[0], whitening=whitening, n_components=8)
    record = whitened.to_config()
    assert whitened.differences(record) == []
    record["whitening"] = {"path": "w.npz"}  # no digest, no sha256
    assert [line.split(":")[0] for line in whitened.differences(record)] == ["whitening"]


def test_the_options_are_held_to_the_model_at_their_bounds(tiny_model, whitening):
    """maxlen from 2 ([CLS] and [SEP]) to the model's 64 positions; k up to its hidden size."""
    EncoderConfig(tiny_model[0], maxlen=2).check()
    EncoderConfig(tiny_model[0], maxlen=TINY_CONFIG["max_position_embeddings"]).check()
    with pytest.raises(BertWhiteningError, match=r"^maxlen must leave room for \[CLS\] and \[SEP\]; got 1$"):
        EncoderConfig(tiny_model[0], maxlen=1).check()
    with pytest.raises(BertWhiteningError, match="^maxlen 65 is larger than the 64 positions of tiny_bert"):
        EncoderConfig(tiny_model[0], maxlen=65).check()
    config = EncoderConfig(tiny_model[0])
    config.check_n_components([0, 8, TINY_CONFIG["hidden_size"]])
    with pytest.raises(BertWhiteningError, match="^n_components 25 is larger than the model's hidden size 24"):
        config.check_n_components([8, 25])


def test_a_record_of_another_model_type_is_another_model(tiny_model):
    """Same files read as another family (NEZHA's relative positions): other vectors."""
    from bert_whitening.config import check_same_model

    identity = EncoderConfig(tiny_model[0]).identity
    with pytest.raises(BertWhiteningError, match=r"^the whitening was made with another model \(.*; its type differ"):
        check_same_model("the whitening", dict(identity, type="nezha"), identity)


def test_another_whitening_of_the_same_shape_differs(tiny_model, whitening):
    other = fit_whitening(WhiteningStats().update(np.random.default_rng(1).normal(size=(80, 24))))
    config = EncoderConfig(tiny_model[0], whitening=whitening, normalize=True)
    assert config.differences(dataclasses.replace(config, whitening=other).to_config())[0].startswith("whitening")
    assert whitening_digest(whitening) != whitening_digest(other)
    with pytest.raises(ValueError, match="not the one recorded"):
        EncoderConfig.from_config(config.to_config(), other)


#: What the previous version (0.1.0) wrote in index.json and read back in ``search`` and
#: ``export --corpus``: key paths and the types of their values.
PREVIOUS_INDEX_KEYS = {
    ("model", "name"): str,
    ("model", "type"): str,
    ("model", "hidden_size"): int,
    ("model", "vocab_sha256"): str,
    ("model_dir",): str,
    ("pooling",): str,
    ("maxlen",): int,
    ("lowercase",): bool,
    ("whitening", "path"): str,
    ("whitening", "sha256"): str,
    ("n_components",): int,
    ("allow_rank_deficient",): bool,
    ("count",): int,
    ("dim",): int,
}


def test_an_index_record_keeps_every_key_the_previous_version_reads(tiny_model, tmp_path):
    from bert_whitening.retrieval.index_directory import IndexDirectory

    from helpers import MANY, run

    corpus, path, index = tmp_path / "c.txt", tmp_path / "w.npz", tmp_path / "index"
    corpus.write_text("".join(s + "\n" for s in MANY[:40]), encoding="utf-8")
    assert run("fit", "--model", tiny_model[0], "--output", path, corpus) == 0
    assert run("index", "--model", tiny_model[0], "--whitening", path, "--output", index, corpus) == 0
    record = IndexDirectory(str(index)).metadata
    for keys, kind in PREVIOUS_INDEX_KEYS.items():
        value = record
        for key in keys:
            value = value[key]
        assert isinstance(value, kind), keys
    assert record["whitening"]["path"] == str(path)
    with open(index / "keys.tsv", encoding="utf-8") as stream:  # the previous reader's split
        assert stream.readline().rstrip("\n").split("\t") == [str(corpus), "1"]


def test_a_record_of_the_previous_version_is_read(tiny_model, whitening, tmp_path):
    path = tmp_path / "w.npz"
    whitening.save(str(path))
    current = EncoderConfig(tiny_model[0], whitening=whitening, normalize=True, whitening_path=str(path)).to_config()
    previous = {
        key: current[key]
        for key in ("model", "model_dir", "pooling", "maxlen", "lowercase", "n_components", "allow_rank_deficient")
    }
    previous["whitening"] = {"path": current["whitening"]["path"], "sha256": current["whitening"]["sha256"]}
    config = EncoderConfig.from_config(previous, whitening)
    assert config.normalize and config.differences(previous) == []
    assert EncoderConfig(tiny_model[0], whitening=whitening, normalize=True).differences(previous) != []


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda r: r.pop("pooling"), "has no 'pooling'"),
        (lambda r: r.update(maxlen="64"), "'maxlen' is '64'"),
        (lambda r: r["model"].pop("vocab_sha256"), "has no 'vocab_sha256'"),
        (lambda r: r.update(flow="f.npz"), "the encoder record: 'flow' is 'f.npz', expected dict or None"),
    ],
)
def test_a_damaged_record_is_one_line(tiny_model, edit, fragment):
    record = EncoderConfig(tiny_model[0]).to_config()
    edit(record)
    with pytest.raises(ValueError, match=fragment):
        EncoderConfig.from_config(record)


def edited_record(directory, name, **changes):
    path = directory / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return str(path)


@pytest.mark.parametrize(
    "changes, said", [(dict(pooling="max"), "unknown pooling 'max'"), (dict(maxlen=10**9), "maxlen 1000000000")]
)
def test_a_record_edited_in_a_saved_encoder_or_an_index_is_refused_naming_its_file(tiny_model, tmp_path, changes, said):
    """Values that pass the record's type checks but no encoder's were refused naming neither
    ``sentence_encoder.json`` nor ``index.json``."""
    from bert_whitening import SentenceEncoder
    from bert_whitening.errors import BertWhiteningError
    from bert_whitening.retrieval.search import search

    encoder = SentenceEncoder.load(tiny_model[0])
    encoder.save(str(tmp_path / "saved"))
    record = edited_record(tmp_path / "saved", "sentence_encoder.json", **changes)
    with pytest.raises(BertWhiteningError, match="^%s: .*%s" % (record, said)):
        SentenceEncoder.load(str(tmp_path / "saved"))
    encoder.index(["a", "b"], str(tmp_path / "index"))
    record = edited_record(tmp_path / "index", "index.json", **changes)
    with pytest.raises(BertWhiteningError, match="^%s: .*%s" % (record, said)):
        search(str(tmp_path / "index"), ["a"])


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda r: r["whitening"].update(beta=7), r"disagrees with the whitening it names on beta \(7 vs 1\.0\)"),
        (lambda r: r["whitening"].update(count=3, rank=24), r"on count \(3 vs 80\)"),
        (lambda r: r["whitening"].update(fitted_on_model={"name": "x"}), r"on fitted_on_model"),
        (lambda r: r.update(whitening=None), r"the record has no whitening, but one was given"),
        (lambda r: r.update(whitening="w.npz"), r"'whitening' is 'w.npz', expected dict or None"),
    ],
)
def test_a_saved_encoders_whitening_record_must_describe_its_whitening(tiny_model, whitening, tmp_path, edit, said):
    """The digest decides what the vectors are, but a record that says another beta or count than
    its file was edited by hand: refused, naming the record, rather than trusted or ignored."""
    from bert_whitening import SentenceEncoder

    SentenceEncoder.load(tiny_model[0], whitening=whitening, n_components=8).save(str(tmp_path / "saved"))
    path = tmp_path / "saved" / "sentence_encoder.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="^%s: .*%s" % (path, said)):
        SentenceEncoder.load(str(tmp_path / "saved"))


def test_every_way_of_building_a_configuration_checks_its_fields(tiny_model, whitening):
    """The checks are the configuration's own: a ``replace`` and a record are checked as a
    direct construction is."""
    with pytest.raises(BertWhiteningError, match="^normalize must be True or False, got str 'no'$"):
        EncoderConfig(tiny_model[0], normalize="no")
    config = EncoderConfig(pathlib.Path(tiny_model[0]))
    assert config.model == tiny_model[0]
    with pytest.raises(BertWhiteningError, match="maxlen must be a positive integer, got 3.5"):
        dataclasses.replace(config, maxlen=3.5)
    with pytest.raises(BertWhiteningError, match="n_components must be an integer"):
        EncoderConfig(tiny_model[0], whitening=whitening, n_components=2.0)


def test_build_encoders_refuses_a_str_for_its_poolings(tiny_model):
    from bert_whitening.models import build_encoders

    with pytest.raises(
        BertWhiteningError,
        match=r"^poolings must be a list of pooling names .str., got str 'cls' \(one pooling: put it in a list\)$",
    ):
        build_encoders(tiny_model[0], poolings="cls")


# --- the memory a batch is held to -------------------------------------------------------------


def cgroup_tree(root, limits):
    """Files under ``root`` as a cgroup mount holds them: ``{relative path: content}``."""
    for name, content in limits.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    return str(root)


GB = 10**9


@pytest.mark.parametrize(
    "physical, address_space, said",
    [
        (2 * GB, None, "this machine's 2.0 GB of memory"),
        (64 * GB, 4500 * 10**6, "the 4.5 GB this process may address (ulimit -v)"),
        (64 * GB, None, "the 5.0 GB of the cgroup memory limit in {v2}/a/memory.max"),
        (4 * GB, None, "this machine's 4.0 GB of memory"),
    ],
    ids=["physical memory", "ulimit -v", "a cgroup above the process's", "physical memory below the cgroup's"],
)
def test_the_memory_a_process_may_use_is_the_least_of_its_limits(tmp_path, monkeypatch, physical, address_space, said):
    """A batch checked against the machine's memory alone passed under a smaller ``ulimit -v``
    or container limit, and ran into the allocator's traceback. Every cgroup from the process's
    up to the mount counts (v2's ``max`` and v1's near-2**63 are no limit)."""
    from bert_whitening.io import bounded

    v2 = cgroup_tree(tmp_path / "v2", {"memory.max": "max", "a/memory.max": "5000000000", "a/b/memory.max": "max"})
    v1 = cgroup_tree(
        tmp_path / "v1", {"memory.limit_in_bytes": "7000000000", "c/memory.limit_in_bytes": "9223372036854771712"}
    )
    (tmp_path / "cgroup").write_text("2:cpu,memory:/c\n1:name=systemd:/\n0::/a/b\n")
    monkeypatch.setattr(bounded, "_OWN_CGROUPS", str(tmp_path / "cgroup"))
    monkeypatch.setattr(
        bounded, "_CGROUP_MEMORY_FILES", {"": (v2, "memory.max"), "memory": (v1, "memory.limit_in_bytes")}
    )
    pages = {"SC_PAGE_SIZE": 1000, "SC_PHYS_PAGES": physical // 1000}
    monkeypatch.setattr(bounded.os, "sysconf", lambda name: pages[name])
    limit = bounded.resource.RLIM_INFINITY if address_space is None else address_space
    monkeypatch.setattr(bounded.resource, "getrlimit", lambda which: (limit, bounded.resource.RLIM_INFINITY))
    assert str(bounded.usable_memory()) == said.format(v2=v2)
    assert sorted(bounded._cgroup_limits()) == [
        (v1 + "/c/memory.limit_in_bytes", 9223372036854771712),
        (v1 + "/memory.limit_in_bytes", 7 * GB),
        (v2 + "/a/memory.max", 5 * GB),
    ]


@pytest.mark.parametrize(
    "own, limits, found",
    [
        (None, {"memory.max": "3000000000"}, "/memory.max"),  # no /proc/self/cgroup: the mount's
        (
            "0::/kubepods.slice/pod:cri-containerd:abc\n",  # a name with colons, as Kubernetes gives
            {"kubepods.slice/pod:cri-containerd:abc/memory.max": "3000000000"},
            "/kubepods.slice/pod:cri-containerd:abc/memory.max",
        ),
    ],
    ids=["no own groups", "only the process's group limited"],
)
def test_a_cgroup_limit_is_found_however_the_process_names_its_group(tmp_path, monkeypatch, own, limits, found):
    """Read from the process's group up to the mount, skipping the groups that set none."""
    from bert_whitening.io import bounded

    v2 = cgroup_tree(tmp_path / "v2", limits)
    if own is not None:
        (tmp_path / "cgroup").write_text(own)
    monkeypatch.setattr(bounded, "_OWN_CGROUPS", str(tmp_path / "cgroup"))
    monkeypatch.setattr(bounded, "_CGROUP_MEMORY_FILES", {"": (v2, "memory.max")})
    assert list(bounded._cgroup_limits()) == [(v2 + found, 3 * GB)]


def test_the_memory_this_process_may_use_is_at_most_the_machines():
    from bert_whitening.io.bounded import usable_memory

    limit = usable_memory()
    assert 0 < limit.bytes <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert str(limit).endswith(("of memory", "(ulimit -v)")) or "of the cgroup memory limit in /" in str(limit)


def test_a_model_call_is_held_to_the_memory_the_process_may_use(tiny_model, monkeypatch):
    """``encode --maxlen 256 --batch-size 1024`` under ``ulimit -v`` passed a check against the
    machine's memory and died in a ResourceExhaustedError traceback. The refusal counts the
    calls under way and the vectors, and says which of them to make smaller."""
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    encoder_config = EncoderConfig(tiny_model[0], maxlen=32)
    sizes = TINY_CONFIG["intermediate_size"] + 3 * TINY_CONFIG["hidden_size"]
    call = 4 * 100 * 32 * (sizes + TINY_CONFIG["num_attention_heads"] * 32)  # 100 sentences at maxlen 32
    vectors = 4 * 1000 * 24  # 1000 vectors of dimension 24
    limit = MemoryLimit(2 * call + vectors, "the {} this process may address (ulimit -v)")
    monkeypatch.setattr(bounded, "usable_memory", lambda: limit)
    encoder_config.check_encoding_memory(1000, 24, 100, 2)
    with pytest.raises(BertWhiteningError) as raised:
        encoder_config.check_encoding_memory(1000, 24, 100, 3)
    assert str(raised.value) == (
        "encoding 1000 sentences, 100 a model call at maxlen 32 needs at least %.1f GB (%.1f GB of tiny_bert's "
        "activations for 3 calls at once, %.1f GB of float32 vectors of dimension 24), more than %s; give a smaller "
        "batch size" % ((3 * call + vectors) / GB, 3 * call / GB, vectors / GB, limit)
    )
    many = 10**6  # whose vectors take more than the calls
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(2 * call + 4 * 24 * many, limit.source))
    encoder_config.check_encoding_memory(many, 24, 100, 2)
    with pytest.raises(BertWhiteningError, match=r"float32 vectors of dimension 24\), .*; encode them in parts"):
        encoder_config.check_encoding_memory(many + 1, 24, 100, 2)
