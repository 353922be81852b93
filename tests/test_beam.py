"""The Beam pipelines refusing what they must, on DirectRunner in-process, on the tiny BERT; their
results against the single-process commands, on every runner, are in test_beam_runners.py."""

import json
import logging
import os
import re
import struct

import numpy as np
import pytest

from bert_whitening import beam, cli
from bert_whitening.beam import WhiteningStatsFn
from bert_whitening.errors import DataError
from bert_whitening.whitening import Whitening, WhiteningStats

from helpers import commands_in_a_fresh_process, limit_memory_in, relative_error, run


def covariance(whitening):
    """``U diag(s) U^T`` back from the stored kernel ``U diag(s ** -1/2)``."""
    basis = whitening.kernel * np.sqrt(whitening.eigenvalues)
    return (basis * whitening.eigenvalues) @ basis.T


def test_combine_fn_merges_as_one_pass():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(n, 5)) + 100 for n in (3, 10, 1, 7)]
    combine = WhiteningStatsFn()
    left = combine.add_input(combine.add_input(combine.create_accumulator(), batches[0]), batches[1])
    right = combine.add_input(combine.add_input(combine.create_accumulator(), batches[2]), batches[3])
    whole = WhiteningStats().update(np.concatenate(batches))
    outer = combine.create_accumulator()
    for batch in (batches[0], batches[2], batches[3]):
        outer = combine.add_input(outer, batch)
    middle = combine.add_input(combine.create_accumulator(), batches[1])
    for accumulators in ([left, combine.create_accumulator(), right], [outer, middle]):  # the second one counts
        merged = combine.extract_output(combine.merge_accumulators(accumulators))
        assert merged.count == whole.count == 21
        assert relative_error(merged.covariance, whole.covariance) <= 1e-12


def test_sorted_lists_sort_each_window_by_length_and_cut_it_into_calls(monkeypatch):
    """25 sentences, windows of 10, calls of 4: each window's sentences sorted by length, cut
    into calls; what is left at the bundle's end as windowed values; nothing lost or repeated."""
    monkeypatch.setattr(beam, "SENTENCES_PER_CALL", 4)
    monkeypatch.setattr(beam, "SORTED_TOGETHER", 10)
    keyed = [(("f", line), "x" * ((line * 7) % 11)) for line in range(1, 26)]
    lists = beam.SortedLists()
    lists.start_bundle()
    calls = [call for sentence in keyed for call in lists.process(sentence)]
    calls += [windowed.value for windowed in lists.finish_bundle()]
    assert [len(call) for call in calls] == [4, 4, 2, 4, 4, 2, 4, 1]
    for window_calls, lines in ((calls[:3], range(1, 11)), (calls[3:6], range(11, 21)), (calls[6:], range(21, 26))):
        window = [keyed_sentence for call in window_calls for keyed_sentence in call]
        assert sorted(line for (_, line), _ in window) == list(lines)
        assert [len(sentence) for _, sentence in window] == sorted(len(sentence) for _, sentence in window)


def test_pipeline_options_only_for_beam_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", "--output", "w.npz", "--direct_num_workers=2", "x.txt"])
    assert "unrecognized option --direct_num_workers" in capsys.readouterr().err


def test_beam_commands_start_the_pipeline_before_tensorflow_is_imported(tiny_model, corpus, tmp_path):
    """The model runs in the workers (`EncodeFn.setup` sets the precision there); TensorFlow's
    import in the command's process only delayed the first worker (see docs/performance.md)."""
    common = ["--model", tiny_model[0], "--input", corpus / "a.txt", "--precision", "float32"]
    commands = [
        ["beam-fit", *common, "--output", tmp_path / "w.npz"],
        ["beam-encode", *common, "--output", tmp_path / "out" / "v"],
    ]
    stub = "from bert_whitening import beam\nbeam.fit_on_runner = beam.encode_on_runner = lambda *args, **kwargs: None"
    statuses, imported, stderr = commands_in_a_fresh_process(commands, stub)
    assert statuses == [0, 0] and not imported, stderr[-2000:]


@pytest.fixture
def fresh_precision(monkeypatch):
    """A process whose precision was never set, on a CPU said to have bfloat16; put back after."""
    from bert_whitening import precision

    monkeypatch.setattr(precision, "_process_precision", None)
    monkeypatch.setattr(precision, "cpu_has_bfloat16", lambda: True)
    yield monkeypatch
    monkeypatch.undo()
    precision._apply(precision._process_precision or "float32")


@pytest.mark.parametrize("bound, chosen", [(0.5, "bfloat16"), (1.5, "float32")])
def test_a_beam_job_decides_auto_once_in_the_driver_and_records_it(
    tiny_model, corpus, tmp_path, fresh_precision, bound, chosen
):
    """Every worker runs the driver's choice (never auto, which each worker would decide on its
    own first sentences). beam-fit fits a whitening on its vectors: float32, with no check (one
    before the fit cannot bound what the fit does to bfloat16's rounding), and the whitening file
    says which precision its vectors had; beam-encode checks its first distinct sentences."""
    from bert_whitening import precision
    from bert_whitening.config import EncoderConfig

    fresh_precision.setattr(precision, "AUTO_MIN_COSINE", bound)
    fresh_precision.setattr(precision, "AUTO_MIN_DISTINCT", 5)
    workers = []
    fresh_precision.setattr(
        beam, "EncodeFn", lambda spec, size, given: workers.append(given) or WorkerFn(spec, size, given)
    )
    spec = EncoderConfig(model=tiny_model[0])
    output = tmp_path / "w.npz"
    beam.fit_on_runner([str(corpus / "*.txt")], spec, str(output), precision="auto")
    assert workers == ["float32"] and precision.process_precision() == "float32"
    assert Whitening.load(str(output)).precision == "float32"
    fresh_precision.setattr(precision, "_process_precision", None)
    beam.encode_on_runner([str(corpus / "*.txt")], spec, str(tmp_path / "v"), precision="auto")
    assert workers == ["float32", chosen]


WorkerFn = beam.EncodeFn


def test_a_job_precision_given_or_on_a_cpu_without_bfloat16_needs_no_check(tiny_model, corpus, monkeypatch):
    from bert_whitening import precision
    from bert_whitening.config import EncoderConfig

    spec = EncoderConfig(model="/nonexistent")  # building it would fail: no check may build it
    assert beam.job_precision("bfloat16", spec, [str(corpus / "*.txt")]) == "bfloat16"
    monkeypatch.setattr(precision, "cpu_has_bfloat16", lambda: False)
    assert beam.job_precision("auto", spec, [str(corpus / "*.txt")]) == "float32"


def write_shards(prefix, shards, encoder=None):
    """``beam-encode``'s shards ``PREFIX-SSSSS-of-NNNNN.tfrecord``, one per list of ``(path, line)``
    keys in ``shards``, each line's vector ``[line, 1]`` (as `beam._examples` writes them), and
    their manifest, with the ``encoder`` record given (else an empty one)."""
    from bert_whitening.backend import tf

    for number, keys in enumerate(shards):
        vectors = [np.array([line, 1.0], np.float32) for _, line in keys]
        with tf.io.TFRecordWriter("%s-%05d-of-%05d%s" % (prefix, number, len(shards), beam.SUFFIX)) as writer:
            for example in beam._examples((keys, vectors)):
                writer.write(example)
    write_manifest(prefix, encoder)


def write_manifest(prefix, encoder=None):
    """The manifest of the shards of ``prefix`` as `beam._write_manifest` writes it."""
    paths = sorted(map(str, prefix.parent.glob(prefix.name + "-*" + beam.SUFFIX)))
    beam._write_manifest(str(prefix) + beam.MANIFEST_SUFFIX, encoder or {}, paths)


def replaced_by_shard_of(shards):
    """Replace shard 1 of ``v`` with shard 1 of another set of ``shards``, written under ``w``."""

    def replace(tmp_path):
        write_shards(tmp_path / "w", shards)
        os.replace(tmp_path / ("w-00001-of-00002" + beam.SUFFIX), shard(tmp_path, 1))

    return replace


def test_read_encoded_reads_a_whole_set_of_shards_in_key_order(tmp_path):
    write_shards(tmp_path / "v", [[("b.txt", 1), ("a.txt", 2)], [("a.txt", 1)]])
    keys, vectors = beam.read_encoded(str(tmp_path / "v-*"))
    assert keys == [("a.txt", 1), ("a.txt", 2), ("b.txt", 1)]
    assert np.array_equal(vectors, [[1, 1], [2, 1], [1, 1]])


def edited_manifest(tmp_path, edit):
    """The manifest of ``v`` with its first shard's entry changed by ``edit``."""
    path = tmp_path / "v.manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest["shards"]["v-00000-of-00002" + beam.SUFFIX])
    path.write_text(json.dumps(manifest))


def shard(tmp_path, number=0, of=2):
    return tmp_path / ("v-%05d-of-%05d%s" % (number, of, beam.SUFFIX))


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda t: shard(t, 1).unlink(), r"v-\*-of-00002.tfrecord: shard 00001 of 2 is missing: a set of shards"),
        (
            lambda t: os.link(shard(t, 1), str(shard(t, 0)) + ".orig"),
            r"v-00000-of-00002.tfrecord.orig: not a shard beam-encode writes \(PREFIX-SSSSS-of-NNNNN.tfrecord\)",
        ),
        (
            lambda t: write_shards(t / "v2", [[("a.txt", 1)]]),
            r"v2-00000-of-00001.tfrecord: record 1 is a.txt line 1 again \(first in .*v-00000-of-00002.tfrecord\)",
        ),
        (
            lambda t: shard(t, 1).write_bytes(shard(t, 1).read_bytes()[:-7]),
            r"v-00001-of-00002.tfrecord: damaged TFRecord file \(.*truncated",
        ),
        (
            lambda t: (shard(t, 1).unlink(), os.mkfifo(shard(t, 1))),
            r"v-00001-of-00002.tfrecord: a FIFO, not a regular file: cannot be read as a beam-encode shard",
        ),
        (
            replaced_by_shard_of([[("a.txt", 1)], []]),  # cut at a record's end: every header still adds up
            r"v-00001-of-00002.tfrecord: not the shard its manifest records \(1 records and sha256 .*, it holds 0 "
            r"records\): edited, cut or swapped",
        ),
        (
            replaced_by_shard_of([[("a.txt", 1)], [("c.txt", 1)]]),  # another run's, of as many records
            r"v-00001-of-00002.tfrecord: not the shard its manifest records \(1 records and sha256 .*, it holds 1 "
            r"records\)",
        ),
        (
            lambda t: (  # another run's set copied in beside this one
                write_shards(t / "w", [[("c.txt", 1)]]),
                os.replace(t / ("w-00000-of-00001" + beam.SUFFIX), t / ("v-00000-of-00001" + beam.SUFFIX)),
            ),
            r"v-00000-of-00001.tfrecord: not a shard of the set its manifest records \(2 shards, "
            r"v-00000-of-00002.tfrecord ...\): two runs' shards under one prefix\?",
        ),
        (
            lambda t: (t / "v.manifest.json").unlink(),
            r"v-\*.tfrecord: no v.manifest.json beside them: beam-encode writes one with its shards",
        ),
        (
            lambda t: (t / "v.manifest.json").write_text('{"shards": []}'),
            r"v.manifest.json has no 'encoder'",
        ),
        (
            lambda t: (t / "v.manifest.json").write_text(
                (t / "v.manifest.json").read_text().replace('"format_version": 1', '"format_version": 2')
            ),
            r"v.manifest.json: a manifest of format 2, where this version reads 1: written by another version",
        ),
        (
            lambda t: edited_manifest(t, lambda entry: entry.update(records=True)),
            r"v.manifest.json: shard 'v-00000-of-00002.tfrecord': 'records' is True, expected int$",
        ),
        (
            lambda t: edited_manifest(t, lambda entry: entry.update(records="2")),
            r"v.manifest.json: shard 'v-00000-of-00002.tfrecord': 'records' is '2', expected int$",
        ),
        (
            lambda t: edited_manifest(t, lambda entry: entry.pop("sha256")),
            r"v.manifest.json: shard 'v-00000-of-00002.tfrecord' has no 'sha256'$",
        ),
    ],
    ids=[
        "missing",
        "not a shard",
        "a key twice",
        "truncated",
        "a FIFO",
        "a record fewer",
        "another run's",
        "two sets",
        "no manifest",
        "not a manifest",
        "another format",
        "records a bool",
        "records a string",
        "no sha256",
    ],
)
def test_read_encoded_refuses_what_beam_encode_does_not_write(tmp_path, damage, said):
    """Index what is not every input line once, and a search finds one line twice or misses some;
    a FIFO would be read by TensorFlow where no signal stops the wait."""
    write_shards(tmp_path / "v", [[("a.txt", 1), ("a.txt", 2)], [("b.txt", 1)]])
    damage(tmp_path)
    with pytest.raises(DataError, match="^%s/%s" % (re.escape(str(tmp_path)), said)):
        beam.read_encoded(str(tmp_path / "v*"))


def forged_shard(path, length, size):
    """A shard of ``size`` bytes (sparse) whose first record header claims ``length`` bytes, the
    length's CRC valid, as TensorFlow's reader checks it before trusting the length."""
    from apache_beam.io.tfrecordio import _TFRecordUtil

    header = struct.pack("<Q", length)
    with open(path, "wb") as stream:
        stream.write(header + struct.pack("<I", _TFRecordUtil._masked_crc32c(header)))
        stream.truncate(size)


@pytest.mark.parametrize(
    "length, size, said",
    [
        (1 << 50, 76, r"record 1, at byte 0, claims 1125899906842624 bytes, which end past the file's 76 bytes"),
        (60, 80, r"record 2, at byte 76, has its header cut past the file's 80 bytes"),
        (
            beam.RECORD_BYTES + 1,
            beam.RECORD_BYTES + 1 + beam.RECORD_FRAMING,
            r"record 1 claims %d bytes, more than the %d of an encoded line"
            % (beam.RECORD_BYTES + 1, beam.RECORD_BYTES),
        ),
    ],
    ids=["past the end", "a header cut", "beyond an encoded line"],
)
def test_a_record_claiming_more_than_it_can_hold_is_refused_before_tensorflow_reads_the_shard(
    tmp_path, monkeypatch, length, size, said
):
    """TensorFlow's reader makes room for the length a header claims: a petabyte in a 76-byte
    shard killed the process."""
    from bert_whitening.backend import tf

    forged_shard(shard(tmp_path, 0, 1), length, size)
    manifest = {
        "format_version": beam.MANIFEST_FORMAT,
        "encoder": {},
        "shards": {shard(tmp_path, 0, 1).name: {"records": 1, "sha256": "forged too"}},
    }
    (tmp_path / "v.manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(tf.data, "TFRecordDataset", lambda path: pytest.fail("TensorFlow was handed %s" % path))
    with pytest.raises(DataError, match=r"v-00000-of-00001.tfrecord: damaged TFRecord file \(%s" % said):
        beam.read_encoded(str(tmp_path / "v-*"))


def test_a_record_that_is_not_an_encoded_line_is_refused(tmp_path):
    from bert_whitening.backend import tf

    with tf.io.TFRecordWriter(str(shard(tmp_path, 0, 1))) as writer:
        writer.write(b"\x00not a protocol buffer")
    write_manifest(tmp_path / "v")
    with pytest.raises(DataError, match=r"v-00000-of-00001.tfrecord: record 1 is not an encoded line"):
        beam.read_encoded(str(tmp_path / "v-*"))


def test_a_stopped_beam_job_says_what_its_workers_put_in_place(tiny_model, corpus, tmp_path, monkeypatch):
    """A worker renamed the whitening into place, or the sink its shards, then the driver was
    stopped: it said "nothing was written". A part of a set of shards is removed."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.io.atomic import placed_outputs

    spec = EncoderConfig(model=tiny_model[0])

    def stopped_after(write):
        def run(build, flags, runner):
            write()
            raise KeyboardInterrupt

        return run

    output = tmp_path / "w.npz"
    monkeypatch.setattr(beam, "run", stopped_after(lambda: output.write_bytes(b"fitted")))
    with placed_outputs() as placed, pytest.raises(KeyboardInterrupt):
        beam.fit_on_runner([str(corpus / "*.txt")], spec, str(output))
    assert placed == [str(output)]
    prefix = tmp_path / "v"
    manifest = tmp_path / ("v" + beam.MANIFEST_SUFFIX)
    whole = [tmp_path / ("v-%05d-of-00002%s" % (number, beam.SUFFIX)) for number in range(2)]
    for written, said in ((whole, [str(manifest), beam.shards(str(prefix))]), (whole[:1], [])):
        manifest.write_text("an older run's, whose shards were deleted")
        monkeypatch.setattr(beam, "run", stopped_after(lambda written=written: [p.write_bytes(b"") for p in written]))
        with placed_outputs() as placed, pytest.raises(KeyboardInterrupt):
            beam.encode_on_runner([str(corpus / "*.txt")], spec, str(prefix))
        assert placed == said
        assert sorted(tmp_path.glob("v-*")) == (whole if said else [])
        if said:  # the older manifest replaced by this set's
            assert sorted(json.loads(manifest.read_text())["shards"]) == [path.name for path in whole]
        else:
            assert not manifest.exists()
        for path in whole:
            path.unlink(missing_ok=True)


def test_a_finished_beam_encode_leaves_a_whole_set_with_its_manifest_or_nothing(
    tiny_model, corpus, tmp_path, monkeypatch
):
    """A runner that reports success with a part of a set written, and a manifest that cannot be
    written (a full disk): shards no reader takes are not left behind."""
    from bert_whitening.config import EncoderConfig

    spec, prefix = EncoderConfig(model=tiny_model[0]), tmp_path / "v"

    def finished_with(written):
        return lambda build, flags, runner: [path.write_bytes(b"") for path in written]

    monkeypatch.setattr(beam, "job_precision", lambda *args, **kwargs: "float32")
    monkeypatch.setattr(beam, "run", finished_with([shard(tmp_path, 1)]))
    with pytest.raises(beam.BertWhiteningError, match="v: the runner finished without a whole set of shards"):
        beam.encode_on_runner([str(corpus / "*.txt")], spec, str(prefix))
    assert os.listdir(tmp_path) == ["corpus"]

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(beam, "run", finished_with([shard(tmp_path, 0), shard(tmp_path, 1)]))
    monkeypatch.setattr(beam, "_write_manifest", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        beam.encode_on_runner([str(corpus / "*.txt")], spec, str(prefix))
    assert os.listdir(tmp_path) == ["corpus"]


def test_a_beam_job_says_how_many_sentences_were_truncated_once(tiny_model, corpus, tmp_path, monkeypatch, caplog):
    """Each model call said its own count ("2 of 4 sentences ..."): a job of a million sentences
    said it hundreds of times, and never the job's. The count is the one ``encode`` gives."""
    monkeypatch.setattr(beam, "SENTENCES_PER_CALL", 4)
    monkeypatch.setattr(beam, "SORTED_TOGETHER", 8)
    common = ("--model", tiny_model[0], "--maxlen", "6")
    with caplog.at_level(logging.INFO):
        assert run("encode", *common, corpus / "a.txt", "--output", tmp_path / "v.npy") == 0
    (expected,) = [message for message in caplog.messages if "were longer than maxlen" in message]
    assert re.fullmatch(r"\d+ of 17 sentences were longer than maxlen 6 tokens and were truncated", expected)
    for command, output in (("beam-encode", tmp_path / "v"), ("beam-fit", tmp_path / "w.npz")):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            assert run(command, *common, "--input", corpus / "a.txt", "--output", output) == 0
        assert [message for message in caplog.messages if "were longer than maxlen" in message] == [expected]


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--runner", "NoSuchRunner"], "--runner NoSuchRunner: Unexpected pipeline runner: NoSuchRunner."),
        (["--runner", "PortableRunner"], "the PortableRunner refused the pipeline: You must specify a --job_endpoint"),
        (
            ["--job_endpoint", "localhost:1"],
            "--job_endpoint is a portable runner's option (--runner PortableRunner): the DirectRunner would ignore it",
        ),
        (["--no_wait_until_finish"], "--no_wait_until_finish: the command waits for its job to end"),
        (["--wait_until_finish_duration", "1000"], "--wait_until_finish_duration: the command waits for its job"),
    ],
    ids=[
        "unknown runner",
        "portable runner without its endpoint",
        "an endpoint for the DirectRunner",
        "not waited for",
        "waited for a while",
    ],
)
def test_a_runner_that_cannot_run_the_pipeline_is_one_line(tiny_model, corpus, tmp_path, monkeypatch, flags, said):
    """A 25- to 42-line traceback each; the DirectRunner ran on, ignoring the endpoint. The options
    are refused before the precision's check encodes anything."""
    from bert_whitening.config import EncoderConfig

    if flags[0] != "--runner":
        monkeypatch.setattr(beam, "job_precision", lambda *args, **kwargs: pytest.fail("the precision was checked"))
    with pytest.raises(beam.BertWhiteningError, match="^" + re.escape(said)):
        beam.fit_on_runner([str(corpus / "a.txt")], EncoderConfig(tiny_model[0]), str(tmp_path / "w.npz"), flags=flags)
    assert os.listdir(tmp_path) == ["corpus"]


def test_a_file_s_sentences_are_keyed_by_their_line_counting_from_1(tmp_path):
    from bert_whitening.data import ReadOptions

    lines = ["first", "", "third one", "fourth"]
    path = tmp_path / "a.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    read = list(beam._read_file(str(path), ReadOptions("lines")))
    assert read == [((str(path), number), line) for number, line in enumerate(lines, 1)]


def test_each_input_file_is_read_once_and_an_empty_one_beside_others_is_taken(tmp_path):
    """Two patterns (one through a symbolic link) naming one file: read once; an empty file is
    refused only when every input is empty."""
    (tmp_path / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_bytes(b"")
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    found = beam.matched_files([str(tmp_path / "a.txt"), str(tmp_path / "link.txt"), str(tmp_path / "empty.txt")])
    assert found == [str(tmp_path / "a.txt"), str(tmp_path / "empty.txt")]
    with pytest.raises(DataError, match="empty.txt: empty input"):
        beam.matched_files([str(tmp_path / "empty.txt")])


def test_read_encoded_refuses_vectors_of_two_sizes_and_the_shards_of_another_encoder(tmp_path, tiny_model):
    import dataclasses

    from bert_whitening.backend import tf
    from bert_whitening.config import EncoderConfig

    vectors = [np.ones(2, np.float32), np.ones(3, np.float32)]
    with tf.io.TFRecordWriter(str(shard(tmp_path, 0, 1))) as writer:
        for example in beam._examples(([("a.txt", 1), ("a.txt", 2)], vectors)):
            writer.write(example)
    write_manifest(tmp_path / "v")
    with pytest.raises(
        DataError, match=r"v-00000-of-00001.tfrecord: record 2 holds a vector of 3 numbers, .*'s first 2"
    ):
        beam.read_encoded(str(tmp_path / "v-*"))
    ours = EncoderConfig(tiny_model[0], pooling="cls")
    write_shards(tmp_path / "w", [[("a.txt", 1)]], ours.to_config())
    assert beam.read_encoded(str(tmp_path / "w-*"), ours)[0] == [("a.txt", 1)]
    with pytest.raises(DataError, match=r"w-\*.tfrecord were encoded with another encoder than this one .*maxlen"):
        beam.read_encoded(str(tmp_path / "w-*"), dataclasses.replace(ours, maxlen=32))


def test_read_encoded_refuses_shards_whose_vectors_cannot_fit_before_reading_one(tmp_path, tiny_model, monkeypatch):
    """``index --from-beam`` reads every encoded line into memory: the 5 records the manifest
    gives its two shards, float32 vectors of the encoder's dimension (24), read one by one and
    joined, are held to the memory the process may use before a shard is opened."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.io.bounded import MemoryLimit

    ours = EncoderConfig(tiny_model[0], pooling="cls")
    write_shards(
        tmp_path / "w", [[("a.txt", 1), ("a.txt", 2), ("a.txt", 3)], [("b.txt", 1), ("b.txt", 2)]], ours.to_config()
    )
    limit_memory_in(monkeypatch, beam, MemoryLimit(2 * 4 * 5 * 24 - 1, "the {} of a test"))
    monkeypatch.setattr(beam, "_check_shard", lambda *arguments: pytest.fail("a shard was read"))
    with pytest.raises(DataError, match=r"w-\*: reading 5 encoded lines needs at least .* dimension 24, read and"):
        beam.read_encoded(str(tmp_path / "w-*"), ours)
    monkeypatch.undo()
    limit_memory_in(monkeypatch, beam, MemoryLimit(2 * 4 * 5 * 24, "the {} of a test"))
    assert len(beam.read_encoded(str(tmp_path / "w-*"), ours)[0]) == 5


def test_a_shard_numbered_beyond_its_count_is_not_part_of_a_whole_set(tmp_path):
    """What `_settle_shards` checks before it writes a manifest for the shards it finds."""
    names = [str(shard(tmp_path, number)) for number in (0, 1, 2)]
    assert beam._check_whole_sets(names[:2]) == [str(tmp_path / "v")]
    with pytest.raises(DataError, match=r"v-\*-of-00002.tfrecord: shard 00002 of 2 is beyond the count"):
        beam._check_whole_sets(names)


def test_a_record_without_an_embedding_is_refused(tmp_path):
    from bert_whitening.backend import tf

    with tf.io.TFRecordWriter(str(shard(tmp_path, 0, 1))) as writer:
        for example in beam._examples(([("a.txt", 1)], [np.zeros(0, np.float32)])):
            writer.write(example)
    write_manifest(tmp_path / "v")
    with pytest.raises(DataError, match=r"v-00000-of-00001.tfrecord: record 1 is not an encoded line \(no embedding\)"):
        beam.read_encoded(str(tmp_path / "v-*"))
