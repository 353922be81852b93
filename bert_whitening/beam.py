"""Fitting and applying the whitening on Apache Beam (``pip install bert-whitening[beam]``).

The whitening statistics are a count, a mean and a centred scatter matrix, which combine exactly
(`WhiteningStats.merge`), so `WhiteningStatsFn` is a ``CombineFn`` around the same accumulator
that ``bert-whitening fit`` uses. `EncodeFn` loads the model once per worker (``setup``) and
encodes lists of `SENTENCES_PER_CALL` sentences of similar length (`SortedLists`, where the files
are read), each sorted by tokens as ``encode`` sorts them.

Pipelines:
- `fit_pipeline`: files -> sentences -> vectors -> one `WhiteningStats` -> one whitening file,
  written by one worker after the combine, to a temporary name and then renamed, so a failed
  pipeline leaves no file;
- `encode_pipeline`: files -> ``(path, line)`` keyed sentences -> whitened vectors -> sharded
  TFRecord files of ``tf.train.Example`` with ``path``, ``line`` (1-based) and ``embedding``;
  Beam's file sink writes the shards under temporary names and publishes them once, so every
  input line appears exactly once. `read_encoded` reads them back.

Input files are read through Beam's ``FileSystems`` (local paths, ``gs://`` ...) with the same
parsers as the single-process commands: a malformed line is an error naming file and line, or
with ``skip_bad_lines`` a skipped line, counted in a warning of the worker's log.
"""

import errno
import gc
import glob
import hashlib
import io
import itertools
import json
import logging
import os
import re
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from bert_whitening.arguments import MAX_SHARDS, shard_count, shown
from bert_whitening.data import ReadOptions, read_sentences
from bert_whitening.errors import BertWhiteningError, DataError, Interrupted
from bert_whitening.io.atomic import PREFIX, check_outputs, claimed_prefix, mark_placed, write_stream_atomically
from bert_whitening.io.bounded import JSON_BYTES, MODEL_SIZES, check_memory, open_regular
from bert_whitening.io.records import Schema, check_fields, parse_record
from bert_whitening.names import EXPORT_PRECISIONS
from bert_whitening.tokenization.token_ids import log_truncated
from bert_whitening.vectors import check_vectors
from bert_whitening.whitening import FitOptions, WhiteningStats, fit_reported

logger = logging.getLogger(__name__)

#: Sentences per `EncodeFn` call. They are grouped where the files are read, before the shuffle
#: that spreads them over the workers: after it, a worker's bundles hold a few dozen elements, so
#: batches formed there were that small, each one padded batch, far below ``encode``'s rate.
#: ``encode`` sorts a call's sentences by length and runs them ``batch_size`` at a time, so the
#: larger the call, the less padding (figures: docs/performance.md).
SENTENCES_PER_CALL = 4096

#: Sentences `SortedLists` sorts by length together before cutting them into calls. Calls cut
#: in file order pad more than ``encode`` sorting all its input; sorting this many by characters
#: first brings a call's padding close to ``encode``'s (figures: docs/performance.md).
SORTED_TOGETHER = 16 * SENTENCES_PER_CALL

#: File name ending of the shards `encode_pipeline` writes.
SUFFIX = ".tfrecord"
#: The bytes a TFRecord record takes besides its data: its length (8 bytes, little-endian), the
#: length's CRC and the data's CRC (4 bytes each).
RECORD_FRAMING = 16
#: The most data a record of a shard may hold: one encoded line, a ``tf.train.Example`` of a vector
#: no wider than a model's hidden size may be (`MODEL_SIZES`), its line number and its input's
#: path, which the room left beside the vector holds many times over.
RECORD_BYTES = 4 * MODEL_SIZES["hidden_size"] + (1 << 20)
#: Beside a set of shards (``PREFIX.manifest.json``), what `encode_on_runner` wrote as it: each shard's
#: records and sha256, and the encoder its vectors are (`EncoderConfig.to_config`). The shards'
#: names alone let a shard cut at a record's end, another run's shard swapped in, or a second
#: set of another count under the prefix through, and said nothing of the model.
MANIFEST_SUFFIX = ".manifest.json"
#: The manifest's ``format_version``: a manifest of another is refused, not read as this one.
MANIFEST_FORMAT = 1
#: A manifest's most bytes: the encoder's record and a line for each of `MAX_SHARDS` shards.
MANIFEST_BYTES = JSON_BYTES + 256 * MAX_SHARDS
#: What a manifest holds, and each of its ``shards``' entries (by shard name).
MANIFEST = Schema(required={"encoder": dict, "shards": dict})
SHARD_ENTRY = Schema(required={"records": int, "sha256": str})

#: Seconds a job on a portable runner may run when ``--job_server_timeout`` is not given (a week;
#: Beam's default of 300 s ended longer jobs): `run`.
PORTABLE_JOB_TIMEOUT = 7 * 24 * 3600

#: Seconds to wait for the job service at ``--job_endpoint`` to answer before refusing.
JOB_ENDPOINT_TIMEOUT = 60


class WhiteningStatsFn(beam.CombineFn):
    """Combines batches of vectors (``(n, dim)`` arrays) into one `WhiteningStats`."""

    def create_accumulator(self):
        return WhiteningStats()

    def add_input(self, accumulator, vectors):
        return accumulator.update(vectors)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


class SortedLists(beam.DoFn):
    """Keyed sentences -> lists of up to `SENTENCES_PER_CALL` of similar length: a bundle's
    sentences are held `SORTED_TOGETHER` at a time and sorted by number of characters, so the
    sentences of a call need about the same number of tokens and its batches pad little."""

    def start_bundle(self):
        self.held = []

    def process(self, keyed_sentence):
        self.held.append(keyed_sentence)
        if len(self.held) >= SORTED_TOGETHER:
            yield from self._lists()

    def finish_bundle(self):
        for sentences in self._lists():
            yield GlobalWindows.windowed_value(sentences)

    def _lists(self):
        held, self.held = self.held, []
        held.sort(key=lambda keyed_sentence: len(keyed_sentence[1]))
        for start in range(0, len(held), SENTENCES_PER_CALL):
            yield held[start : start + SENTENCES_PER_CALL]


#: The job's counts of sentences encoded and cut to maxlen, summed over its workers by the runner
#: and logged once by the driver (`log_truncated_in_job`), where each call logged its own.
SENTENCES = Metrics.counter("bert_whitening", "sentences")
TRUNCATED = Metrics.counter("bert_whitening", "truncated")


class EncodeFn(beam.DoFn):
    """``[(key, sentence), ...]`` -> ``(keys, vectors)``, the model loaded once per worker from an
    `bert_whitening.config.EncoderConfig`; ``batch_size`` as in ``encode``. ``precision`` is set
    for the worker's process in ``setup`` (`bert_whitening.precision.set_precision`)."""

    def __init__(self, config, batch_size=128, precision="float32"):
        self.config, self.batch_size, self.precision = config, batch_size, precision
        self.encoder = None

    def setup(self):
        from bert_whitening.precision import set_precision

        set_precision(self.precision)
        from bert_whitening.models import build

        self.encoder = build(self.config)

    def teardown(self):
        # The runner waits for the worker to exit: skip the last garbage collection, a slow pass
        # over TensorFlow's objects (as bert_whitening.cli.console_main does).
        gc.freeze()

    def process(self, batch):
        from bert_whitening.encoding import encode_counted

        keys = [key for key, _ in batch]
        vectors, truncated = encode_counted(self.encoder, [sentence for _, sentence in batch], self.batch_size)
        SENTENCES.inc(len(batch))
        TRUNCATED.inc(truncated)
        yield keys, check_vectors(vectors, "beam", self.config.normalize, keys=keys, stages=self.config.stages)


def _read_file(path, read):
    """``((path, number), sentence)`` for each sentence of one file, read as ``read`` (a
    `ReadOptions`) says; ``number`` counts sentences from 1, which for a sentence file is its line
    number."""
    sentences = read_sentences(path, read.format, read.skip_bad_lines, FileSystems.open)
    for number, sentence in enumerate(sentences, 1):
        yield (path, number), sentence


def matched_files(patterns):
    """The files matching ``patterns`` (Beam file systems), each once however many patterns match
    it, in order; a pattern that matches nothing, or only empty files in all, is refused, and so
    is a local match that is not a regular file (`_check_regular`)."""
    found = {}
    for pattern in patterns:
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            raise BertWhiteningError("%s: no files match" % pattern)
        for metadata in matched:
            _check_regular(metadata.path, "Beam input")
            found.setdefault(_canonical(metadata.path), metadata)
    if all(metadata.size_in_bytes == 0 for metadata in found.values()):
        raise DataError("%s: empty input (no lines)" % ", ".join(patterns))
    return [metadata.path for metadata in found.values()]


def _check_regular(path, what):
    """Refuse a local ``path`` that is not a regular file: Beam reads its files by name and splits
    them by their size, which a FIFO or a device does not have (one was taken as empty), and a
    read from a FIFO in TensorFlow's C++ waits where no signal reaches."""
    if FileSystems.get_scheme(path) is None:
        open_regular(path, DataError, what).close()


def _canonical(path):
    """One name per local file (symlinks and relative parts resolved); other schemes as given."""
    return os.path.realpath(path) if FileSystems.get_scheme(path) is None else path


def _sentences(pipeline, patterns, read):
    """Lists of up to `SENTENCES_PER_CALL` keyed sentences of similar length (`SortedLists`) of
    every file matching ``patterns``, spread over the workers."""
    return (
        pipeline
        | "Paths" >> beam.Create(matched_files(patterns))
        | "Read" >> beam.FlatMap(_read_file, read)
        | "Batch" >> beam.ParDo(SortedLists())
        | "Spread" >> beam.Reshuffle()
    )


def write_whitening(stats, path, options, recorded):
    """Fit on the combined statistics (`fit_reported` with ``options`` and ``recorded``) and write
    the file under a temporary name, then rename."""
    whitening = fit_reported(stats, "the input", options, **recorded)
    if FileSystems.get_scheme(path) is None:  # as every local output is written (links, long names)
        whitening.save(path)
    else:
        buffer = io.BytesIO()
        whitening.write(buffer)
        temporary = "%s.tmp-%s" % (path, uuid.uuid4().hex)
        try:
            with FileSystems.create(temporary) as stream:
                stream.write(buffer.getvalue())
            FileSystems.rename([temporary], [path])
        except BaseException:
            if FileSystems.exists(temporary):
                FileSystems.delete([temporary])
            raise
    logger.info("wrote %s", path)
    return path


def fit_pipeline(pipeline, patterns, encode_fn, output, options, recorded, read=ReadOptions()):
    """Add the fit to ``pipeline``: ``encode_fn`` an `EncodeFn` of the unwhitened encoder (its
    batch size is its own; ``read`` says how the files are read); ``options`` (a `FitOptions`)
    and ``recorded`` (`fit_whitening`'s pooling, model_identity, precision and
    allow_rank_deficient) go to `fit_reported`."""
    return (
        _sentences(pipeline, patterns, read)
        | "Encode" >> beam.ParDo(encode_fn)
        | "Vectors" >> beam.Map(lambda encoded: encoded[1])
        | "Combine" >> beam.CombineGlobally(WhiteningStatsFn())
        | "Write" >> beam.Map(write_whitening, output, options, recorded)
    )


def _examples(encoded):
    from bert_whitening.backend import tf

    keys, vectors = encoded
    for (path, line), vector in zip(keys, vectors, strict=True):
        yield tf.train.Example(
            features=tf.train.Features(
                feature={
                    "path": tf.train.Feature(bytes_list=tf.train.BytesList(value=[path.encode("utf-8")])),
                    "line": tf.train.Feature(int64_list=tf.train.Int64List(value=[line])),
                    # a list: from a numpy row, protobuf converts element by element (slower; docs/performance.md)
                    "embedding": tf.train.Feature(float_list=tf.train.FloatList(value=vector.tolist())),
                }
            )
        ).SerializeToString()


def encode_pipeline(pipeline, patterns, encode_fn, output_prefix, num_shards=0):
    """Add the encode to ``pipeline``: one TFRecord example per input line, in shards
    ``PREFIX-SSSSS-of-NNNNN.tfrecord`` (``num_shards`` 0 lets the runner choose)."""
    return (
        _sentences(pipeline, patterns, ReadOptions("lines"))
        | "Encode" >> beam.ParDo(encode_fn)
        | "Examples" >> beam.FlatMap(_examples)
        | "Write" >> beam.io.WriteToTFRecord(output_prefix, file_name_suffix=SUFFIX, num_shards=num_shards)
    )


def pipeline_option_names():
    """Every option string Beam's pipeline options parse (``--runner``, ``--direct_num_workers``,
    ...), from the parser Beam builds of them."""
    from apache_beam.options.pipeline_options import PipelineOptions

    parsers = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    return list(parsers[0]._option_string_actions)


def unknown_pipeline_options(flags):
    """The options among ``flags`` (``--name=value`` or ``--name``, values between) that Beam's
    pipeline options do not parse: Beam drops them with a warning, and runs without what they
    were meant to set."""
    known = set(pipeline_option_names())
    names = [str(flag).split("=", 1)[0] for flag in flags if str(flag).startswith("-")]
    return [name for name in names if name not in known]


def run(build, flags=(), runner="DirectRunner"):
    """Run ``build(pipeline)`` with the Beam pipeline options in ``flags`` on the runner they
    name, else on ``runner`` (`pipeline_options`); return its `PipelineResult`."""
    options, name, given = pipeline_options(flags, runner)
    try:
        chosen = _runner(options, given)
    except BertWhiteningError:
        raise
    except (ValueError, ImportError) as error:  # no such runner, or its package is not installed
        raise BertWhiteningError("--runner %s: %s" % (name, _first_line(error))) from None
    try:
        with beam.Pipeline(runner=chosen, options=options) as pipeline:
            build(pipeline)
        return pipeline.result
    except Exception as error:
        unwrapped = _unwrapped(error)
        refused = isinstance(error, (ValueError, NotImplementedError)) and not isinstance(error, BertWhiteningError)
        if unwrapped is error and refused and not _is_direct(name):
            # another runner's refusal of its options ("You must specify a --job_endpoint", a
            # Dataflow job without its project), before any step ran: the user's to mend
            raise BertWhiteningError("the %s refused the pipeline: %s" % (name, _first_line(error))) from None
        raise unwrapped from None


def log_truncated_in_job(result, maxlen):
    """Log, once for the job, how many of its sentences were cut to ``maxlen`` (`TRUNCATED`), as
    ``encode`` logs it for its call; nothing is said where the runner reports no counters."""
    from apache_beam.metrics.metric import MetricsFilter

    try:
        counters = result.metrics().query(MetricsFilter().with_namespace("bert_whitening"))["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return
    counted = {counter.key.metric.name: counter.committed or 0 for counter in counters}
    log_truncated(counted.get("truncated", 0), counted.get("sentences", 0), maxlen)


def pipeline_options(flags, runner):
    """``(PipelineOptions, runner name, flags given)`` of ``flags``, refused as the commands refuse
    them before any work: a flag Beam does not parse (Beam would drop it with a warning, and run
    without what it was meant to set), one that lets the job run on after the command returns
    (its output would be settled before the job wrote it), and a portable runner's endpoint for
    the DirectRunner, which would ignore it."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    unknown = unknown_pipeline_options(flags)
    if unknown:
        raise BertWhiteningError("%s: not a Beam pipeline option, which Beam would drop" % unknown[0])
    options = PipelineOptions(list(flags))
    standard = options.view_as(StandardOptions)
    standard.runner = name = standard.runner or runner
    given = {flag.split("=", 1)[0] for flag in flags}
    unwaited = sorted(given & {"--no_wait_until_finish", "--wait_until_finish_duration"})
    if unwaited:
        raise BertWhiteningError(
            "%s: the command waits for its job to end, to put its output in place whole (and its manifest)"
            % unwaited[0]
        )
    portable_only = sorted(given & {"--job_endpoint", "--artifact_endpoint"})
    if portable_only and _is_direct(name):
        raise BertWhiteningError(
            "%s is a portable runner's option (--runner PortableRunner): the DirectRunner would ignore it"
            % portable_only[0]
        )
    return options, name, given


def _is_direct(name):
    """Whether the runner ``name`` (a name or a class path) is the DirectRunner."""
    return name.rsplit(".", 1)[-1] in ("DirectRunner", "SwitchingDirectRunner")


def _first_line(error):
    """A runner's refusal in one line: its lines joined (Dataflow's first ends in a colon), cut short."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _runner(options, given):
    """The runner ``options`` name, except that DirectRunner is Beam's FnApiRunner: since Beam
    2.68 the DirectRunner first tries Prism, a binary it downloads at run time, and falls back to
    the FnApiRunner only offline, where the tests and benchmarks run: the network would choose
    the engine."""
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners import create_runner
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle, PortableRunner

    name = options.view_as(StandardOptions).runner
    if _is_direct(name):
        # The pipeline options reach the workers as the DirectRunner passes them.
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(provision))
    chosen = create_runner(name)
    if isinstance(chosen, PortableRunner) and not given & {"--job_server_timeout", "--job-server-timeout"}:
        _let_the_job_outlast_the_timeout(options)  # also on Flink, Spark and Prism
    return chosen


def _let_the_job_outlast_the_timeout(options):
    """Beam opens a portable job's state and message streams with ``--job_server_timeout`` (300 s
    by default), so a longer job failed with ``DEADLINE_EXCEEDED`` (apache/beam#35867): give it
    `PORTABLE_JOB_TIMEOUT`. Beam also waits that long for a ``--job_endpoint`` to answer, so that
    is checked first, within `JOB_ENDPOINT_TIMEOUT`."""
    import grpc
    from apache_beam.options.pipeline_options import PortableOptions

    portable = options.view_as(PortableOptions)
    if portable.job_endpoint and portable.job_endpoint != "embed":
        with grpc.insecure_channel(portable.job_endpoint) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=JOB_ENDPOINT_TIMEOUT)
            except grpc.FutureTimeoutError:
                raise BertWhiteningError(
                    "--job_endpoint %s: no job service answered within %d s"
                    % (portable.job_endpoint, JOB_ENDPOINT_TIMEOUT)
                ) from None
    portable.job_server_timeout = PORTABLE_JOB_TIMEOUT


def _unwrapped(error):
    """The error a step raised, out of the runner's wrapping (``RuntimeError: ... [while running
    'Encode']``), so that SIGINT/SIGTERM stay interruptions and a full disk an ``OSError``, each
    reported in one line; anything else as raised."""
    seen = error
    while seen is not None:
        if isinstance(seen, (KeyboardInterrupt, BertWhiteningError, OSError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    interrupted = re.search(r"\bInterrupted: (\d+)|\bKeyboardInterrupt\b", str(error))
    if interrupted:
        return Interrupted(int(interrupted.group(1))) if interrupted.group(1) else KeyboardInterrupt()
    space = re.search(r"No space left on device", str(error))
    if space:
        return OSError(errno.ENOSPC, "cannot write the output: %s" % os.strerror(errno.ENOSPC))
    return error


def fit_on_runner(
    patterns,
    config,
    output,
    *,
    options=FitOptions(),
    read=ReadOptions(),
    precision="float32",
    flags=(),
    runner="DirectRunner",
):
    """`fit_pipeline` on ``runner``: the whitening fitted with ``options`` (a `FitOptions`) on the
    files ``patterns`` match, read as ``read`` (a `ReadOptions`) says. The file records the model
    as ``fit``'s does (read from its configuration and vocabulary; the weights are loaded by the
    workers)."""
    from bert_whitening.checkpoints import find_model

    check_outputs([output], _local_inputs(patterns) + config.read_paths())
    pipeline_options(flags, runner)  # refused before the precision's check encodes
    precision = job_precision(precision, config, patterns, read, fits=True)
    recorded = {
        "pooling": config.pooling,
        "model_identity": find_model(config.model).identity(config.model_type.lower()),
        "tokenization": config.tokenization,
        "allow_rank_deficient": config.allow_rank_deficient,
        "precision": precision,
    }
    encode_fn = EncodeFn(config, read.batch_size, precision)
    before = _file_identity(output)
    build = lambda pipeline: fit_pipeline(pipeline, patterns, encode_fn, output, options, recorded, read)
    try:
        result = run(build, flags, runner)
    except BaseException:  # interrupted after a worker put the file in place: the stopped line says so
        if _file_identity(output) not in (None, before):
            mark_placed(output)
        raise
    mark_placed(output)
    log_truncated_in_job(result, config.maxlen)


def _file_identity(path):
    """``(device, inode, modification time)`` of a local file, None where there is none (or for a
    remote path, whose writes are its file system's): what tells a file put in place since."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino, info.st_mtime_ns


def job_precision(precision, config, patterns, read=ReadOptions(), fits=False):
    """The one precision of a job: ``float32`` or ``bfloat16`` as given, and ``auto`` decided here,
    in the driver, once for every worker (each deciding on its own first sentences could mix
    precisions in one output): float32 for a job that ``fits`` a whitening on its vectors or on a
    CPU without bfloat16 instructions, else this process's
    `bert_whitening.precision.resolve_auto` check with the job's own encoder on the distinct
    sentences among the inputs' first `bert_whitening.encoding.CHUNK_SENTENCES` (what
    ``encode``'s first call holds). The workers then run what it returns."""
    from bert_whitening import precision as process

    if precision != "auto":
        return precision
    process.set_precision("auto")
    if fits:
        process.resolve_before_fitting()
    elif not process.cpu_has_bfloat16():
        return "float32"
    else:
        from bert_whitening.encoding import CHUNK_SENTENCES, encode
        from bert_whitening.models import build

        lines = itertools.islice(
            (sentence for path in matched_files(patterns) for _, sentence in _read_file(path, read)), CHUNK_SENTENCES
        )
        sentences = list(dict.fromkeys(lines))[: process.AUTO_CHECK_SENTENCES]
        if sentences:
            encode(build(config), sentences, read.batch_size, progress=False)  # decides, once, on them
    chosen = process.process_precision()
    return chosen if chosen in EXPORT_PRECISIONS else "float32"


def _local_inputs(patterns):
    """The local files ``patterns`` match, for `check_outputs` (a remote file system checks
    its own paths)."""
    return [path for pattern in patterns if FileSystems.get_scheme(pattern) is None for path in glob.glob(pattern)]


def shards(output_prefix):
    """The pattern of the shards `encode_pipeline` writes for ``output_prefix``."""
    return output_prefix + "-*-of-*" + SUFFIX


def encode_on_runner(
    patterns,
    config,
    output_prefix,
    *,
    num_shards=0,
    batch_size=128,
    precision="float32",
    flags=(),
    runner="DirectRunner",
):
    """`encode_pipeline` on ``runner``. Refuses to start when shards of ``output_prefix``
    exist (a reader of ``PREFIX-*`` would see old and new lines together) or another run writes
    them (`claimed_prefix`), removes the sink's temporary files a killed run left (locally,
    where a claim can be taken), and its own if the pipeline fails."""
    num_shards = shard_count(num_shards)
    check_outputs([(output_prefix, PREFIX)], _local_inputs(patterns) + config.read_paths())
    pipeline_options(flags, runner)  # refused before the precision's check encodes
    with claimed_prefix(output_prefix) as claimed:
        if claimed:  # no other run writes there: a killed one's
            for leftover in _remove_sink_temporaries(output_prefix):
                logger.info("removed %s, left by an interrupted run", leftover)
        existing = FileSystems.match([shards(output_prefix)])[0].metadata_list
        if existing:
            raise BertWhiteningError(
                "%s: %d output shards already exist (%s ...); remove them or choose "
                "another --output" % (output_prefix, len(existing), existing[0].path)
            )
        try:
            read = ReadOptions("lines", batch_size=batch_size)
            encode_fn = EncodeFn(config, read.batch_size, job_precision(precision, config, patterns, read))
            result = run(
                lambda pipeline: encode_pipeline(pipeline, patterns, encode_fn, output_prefix, num_shards),
                flags,
                runner,
            )
        except BaseException:
            _remove_sink_temporaries(output_prefix)
            _settle_shards(output_prefix, config)
            raise
        if not _settle_shards(output_prefix, config):
            raise BertWhiteningError("%s: the runner finished without a whole set of shards" % output_prefix)
    log_truncated_in_job(result, config.maxlen)


def _settle_shards(output_prefix, config):
    """Put the shards of ``output_prefix`` the sink wrote (the run began with none) in place with
    their manifest, after the run, finished or not, and return whether it did: a whole set gets
    its manifest (any older one, whose shards were deleted before this run, is replaced) and the
    stopped line names them; a part of a set, which no reader takes, is removed, and so is an
    older manifest. Shards whose manifest cannot be written are removed too: a reader refuses
    them."""
    paths = sorted(found.path for found in FileSystems.match([shards(output_prefix)])[0].metadata_list)
    manifest = output_prefix + MANIFEST_SUFFIX
    try:
        _check_whole_sets(paths)
    except DataError:
        FileSystems.delete(paths)
        paths = []
    if not paths:
        if FileSystems.exists(manifest):
            FileSystems.delete([manifest])
        return False
    try:
        _write_manifest(manifest, config.to_config(), paths)
    except BaseException:
        FileSystems.delete(paths)
        raise
    mark_placed(shards(output_prefix))
    return True


def _write_manifest(path, encoder, paths):
    """Write the manifest ``path`` of the shards ``paths``: each one's records (counted from their
    headers) and sha256 by its name, and the ``encoder`` record; locally to a temporary name
    renamed into place, elsewhere as one object."""
    described = {
        "format_version": MANIFEST_FORMAT,
        "encoder": encoder,
        "shards": {
            FileSystems.split(shard)[1]: dict(zip(("records", "sha256"), _walk_shard(shard), strict=True))
            for shard in paths
        },
    }
    text = json.dumps(described, indent=1, sort_keys=True).encode("utf-8")
    if FileSystems.get_scheme(path) is None:
        write_stream_atomically(path, lambda stream: stream.write(text))
    else:
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            stream.write(text)


def _remove_sink_temporaries(output_prefix):
    """Delete the ``beam-temp-NAME-*`` directories Beam's file sink leaves after a failure, and
    return their paths."""
    directory, name = FileSystems.split(output_prefix)
    pattern = FileSystems.join(directory, "beam-temp-%s-*" % name)
    if FileSystems.get_scheme(pattern) is None:  # local: match() lists files, not (empty) directories
        leftovers = glob.glob(os.path.join(glob.escape(directory), "beam-temp-%s-*" % glob.escape(name)))
    else:  # object stores have no empty directories, only the files in them
        leftovers = [found.path for found in FileSystems.match([pattern + "/*"])[0].metadata_list]
    if leftovers:
        FileSystems.delete(leftovers)
    return leftovers


#: A shard's name as `encode_pipeline` writes it (`shards`): ``PREFIX-SSSSS-of-NNNNN.tfrecord``.
_SHARD_NAME = re.compile(r"(?P<prefix>.*)-(?P<number>\d{5,})-of-(?P<shards>\d{5,})%s\Z" % re.escape(SUFFIX))


def read_encoded(pattern, encoder=None):
    """``(keys, vectors)`` of the TFRecord shards matching ``pattern``: keys as ``(path, line)``
    tuples, vectors as a float32 array, sorted by key; empty when nothing matches.

    What `encode_pipeline` writes is every input line once, so anything else is refused in one
    line before it is indexed: a file not named as a shard, a set of shards with one missing, a
    shard that is not the one its set's manifest records (`MANIFEST_SUFFIX`: edited, cut at a
    record's end, another run's), a record that is damaged or not an encoded line, a key twice,
    vectors of two sizes; and, given the ``encoder`` (an `EncoderConfig`) the vectors are for,
    shards another encoder made. A record claiming more than it can hold is refused before
    TensorFlow reads its shard (`_walk_shard`). Given the ``encoder``, the vectors the manifests
    record are held to the memory this process may use before a shard is read (`check_memory`:
    read one by one, then joined into one array)."""
    from bert_whitening.backend import tf

    found = sorted(match.path for match in FileSystems.match([pattern])[0].metadata_list)
    paths = [path for path in found if not path.endswith(MANIFEST_SUFFIX)]  # ``PREFIX*`` matches it too
    manifests = {prefix: _manifest(prefix) for prefix in _check_whole_sets(paths)}
    for prefix, manifest in manifests.items():
        differences = encoder.differences(manifest["encoder"]) if encoder is not None else []
        if differences:
            raise DataError(
                "%s-*%s were encoded with another encoder than this one (ours vs the shards': %s)"
                % (prefix, SUFFIX, "; ".join(differences))
            )
    if encoder is not None:  # the records each manifest says its shards hold: each shard is checked against it
        count = sum(entry["records"] for manifest in manifests.values() for entry in manifest["shards"].values())
        check_memory(
            "%s: reading %d encoded lines" % (pattern, count),
            {"of float32 vectors of dimension %d, read and joined" % encoder.dim: 2 * 4 * count * encoder.dim},
            DataError,
        )
    records, where = [], {}
    for path in paths:
        _check_shard(path, manifests[_SHARD_NAME.match(path)["prefix"]])
        try:
            for number, serialized in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator(), 1):
                key, vector = _encoded_line(serialized, path, number)
                if key in where:
                    raise DataError(
                        "%s: record %d is %s line %d again (first in %s): shards of two runs, or a copy?"
                        % (path, number, key[0], key[1], where[key])
                    )
                if records and len(vector) != len(records[0][1]):
                    raise DataError(
                        "%s: record %d holds a vector of %d numbers, %s's first %d"
                        % (path, number, len(vector), paths[0], len(records[0][1]))
                    )
                where[key] = path
                records.append((key, vector))
        except tf.errors.OpError as error:  # a truncated or corrupted file
            raise DataError("%s: damaged TFRecord file (%s)" % (path, error.message.splitlines()[0])) from None
    records.sort(key=lambda record: record[0])
    return [key for key, _ in records], np.array([vector for _, vector in records], dtype=np.float32)


def _walk_shard(path):
    """``(records, sha256)`` of a shard, read once from start to end, a record at a time, refusing a
    record that claims more than an encoded line holds or than the file holds before its bytes are
    read: TensorFlow's reader makes room for the length a record header claims once that length's
    CRC matches, so a forged header of a small file made it reserve any size (the process died).
    A shard TensorFlow is handed holds records of bounded size that end within it. A local shard
    must be a regular file (a FIFO would be read by TensorFlow where no signal stops the wait)."""
    digest = hashlib.sha256()
    with _opened(path, "beam-encode shard") as stream:
        size, offset = stream.seek(0, io.SEEK_END), 0
        stream.seek(0)
        for number in itertools.count(1):
            if offset == size:
                return number - 1, digest.hexdigest()
            header = stream.read(8)
            length = int.from_bytes(header, "little")
            if len(header) < 8 or offset + RECORD_FRAMING + length > size:
                claim = "claims %d bytes, which end" % length if len(header) == 8 else "has its header cut"
                raise DataError(
                    "%s: damaged TFRecord file (record %d, at byte %d, %s past the file's %d bytes: truncated?)"
                    % (path, number, offset, claim, size)
                )
            if length > RECORD_BYTES:
                raise DataError(
                    "%s: damaged TFRecord file (record %d claims %d bytes, more than the %d of an encoded line)"
                    % (path, number, length, RECORD_BYTES)
                )
            digest.update(header)
            digest.update(stream.read(RECORD_FRAMING - 8 + length))  # the length's CRC, the data, its CRC
            offset += RECORD_FRAMING + length


def _manifest(prefix):
    """The manifest `_write_manifest` wrote beside the shards of ``prefix``, checked for its keys."""
    path = prefix + MANIFEST_SUFFIX
    if not FileSystems.exists(path):
        raise DataError(
            "%s-*%s: no %s beside them: beam-encode writes one with its shards (these are of an earlier "
            "version, or not beam-encode's); run beam-encode again" % (prefix, SUFFIX, os.path.basename(path))
        )
    with _opened(path, "shard manifest") as stream:
        text = stream.read(MANIFEST_BYTES + 1)
    if len(text) > MANIFEST_BYTES:
        raise DataError("%s: larger than %d bytes: not a shard manifest" % (path, MANIFEST_BYTES))
    manifest = parse_record(text, MANIFEST, path, DataError)
    for name, entry in manifest["shards"].items():
        check_fields(entry, SHARD_ENTRY, "%s: shard %s" % (path, shown(name)), DataError)
    if manifest.get("format_version") != MANIFEST_FORMAT:
        raise DataError(
            "%s: a manifest of format %s, where this version reads %d: written by another version of "
            "bert-whitening; run beam-encode again" % (path, manifest.get("format_version"), MANIFEST_FORMAT)
        )
    return manifest


def _opened(path, what):
    """A binary stream of ``path``: a local one a regular file (`open_regular`: a FIFO would be
    read where no signal stops the wait), any other through Beam's file system."""
    if FileSystems.get_scheme(path) is None:
        return open_regular(path, DataError, what)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _check_shard(path, manifest):
    """Refuse a shard that is not the one its set's ``manifest`` records, by name, records and sha256."""
    name = FileSystems.split(path)[1]
    recorded = manifest["shards"].get(name)
    if recorded is None:
        raise DataError(
            "%s: not a shard of the set its manifest records (%d shards, %s ...): two runs' shards under one prefix?"
            % (path, len(manifest["shards"]), min(manifest["shards"], default="none"))
        )
    records, sha256 = _walk_shard(path)
    if records != recorded["records"] or sha256 != recorded["sha256"]:
        raise DataError(
            "%s: not the shard its manifest records (%d records and sha256 %.12s..., it holds %d records): "
            "edited, cut or swapped since beam-encode wrote it"
            % (path, recorded["records"], recorded["sha256"], records)
        )


def _check_whole_sets(paths):
    """Each of ``paths`` is named as a shard, and every set of them (one prefix and count) is
    whole; returns the prefixes."""
    sets = {}
    for path in paths:
        name = _SHARD_NAME.match(path)
        if name is None:
            raise DataError("%s: not a shard beam-encode writes (PREFIX-SSSSS-of-NNNNN%s)" % (path, SUFFIX))
        sets.setdefault((name["prefix"], int(name["shards"])), set()).add(int(name["number"]))
    for (prefix, count), numbers in sets.items():
        missing = sorted(set(range(count)) - numbers)
        if missing or max(numbers) >= count:
            first = missing[0] if missing else max(numbers)
            raise DataError(
                "%s-*-of-%05d%s: shard %05d of %d is %s: a set of shards is read whole or not at all"
                % (prefix, count, SUFFIX, first, count, "missing" if missing else "beyond the count")
            )
    return sorted({prefix for prefix, _ in sets})


def _encoded_line(serialized, path, number):
    """``((path, line), vector)`` of one record, or a DataError naming it."""
    from google.protobuf.message import DecodeError

    from bert_whitening.backend import tf

    try:
        feature = tf.train.Example.FromString(serialized).features.feature
        key = (feature["path"].bytes_list.value[0].decode("utf-8"), feature["line"].int64_list.value[0])
        vector = np.array(feature["embedding"].float_list.value, dtype=np.float32)
    except (DecodeError, IndexError, KeyError, UnicodeDecodeError, ValueError) as error:
        raise DataError("%s: record %d is not an encoded line (%s)" % (path, number, error)) from None
    if not len(vector):
        raise DataError("%s: record %d is not an encoded line (no embedding)" % (path, number))
    return key, vector
