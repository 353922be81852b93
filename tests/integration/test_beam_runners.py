"""Both Beam pipelines against the single-process ``fit`` and ``encode``, on every runner.

The in-process DirectRunner never pickles `EncodeFn` or `WhiteningStatsFn` to another process
nor runs ``setup`` in a fresh one, so the same checks also run on
- DirectRunner with ``--direct_running_mode multi_processing --direct_num_workers 2``: SDK
  workers started as subprocesses of the test;
- PortableRunner against Beam's Python local job service, with ``--environment_type EXTERNAL``
  workers from ``worker_pool_main``: the job service and the worker pool are processes that the
  fixture starts on loopback ports (`tests/beam_portable.py`), and the pool starts one
  process per worker.
`ProbedEncodeFn` records the id of every process that encodes, so each test proves where the
vectors were made (outside the test's own process, but for the in-process runner).
"""

import functools
import itertools
import os
import sys
import threading
import time

import apache_beam
import beam_portable
import numpy as np
import pytest
from beam_portable import local_portable_runner
from test_beam import covariance

from bert_whitening import beam
from bert_whitening.data import ReadOptions
from bert_whitening.whitening import Whitening

from helpers import LINES, relative_error, run, write_corpus

pytestmark = pytest.mark.slow

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
MULTI_PROCESSING = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")


class ProbedEncodeFn(beam.EncodeFn):
    """`EncodeFn` that leaves a file named after its process id in ``probe_directory`` each
    time it encodes; the test reads the ids back."""

    def __init__(self, *args, probe_directory, **kwargs):
        super().__init__(*args, **kwargs)
        self.probe_directory = probe_directory

    def process(self, batch):
        open(os.path.join(self.probe_directory, str(os.getpid())), "a").close()
        yield from super().process(batch)


def worker_environment():
    """The test's environment, with this checkout and tests/ importable by every worker (the
    probe is pickled by reference to this module) and this interpreter first on PATH (the
    worker pool starts its workers as ``python``)."""
    path = [ROOT, TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(path),
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )


@pytest.fixture
def workers_environment(monkeypatch):
    """`worker_environment` set in this process, for the workers DirectRunner starts."""
    for name, value in worker_environment().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def probed(workers_environment, monkeypatch, tmp_path):
    """Encoding through `ProbedEncodeFn`; returns the directory of the process ids it records."""
    directory = tmp_path / "probe"
    directory.mkdir()
    monkeypatch.setattr(beam, "EncodeFn", functools.partial(ProbedEncodeFn, probe_directory=str(directory)))
    return directory


def encoding_processes(directory):
    return {int(name) for name in os.listdir(directory)}


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """``(flags, service pids)``: `local_portable_runner` with this checkout and tests/ on the
    workers' PYTHONPATH, stopped at teardown."""
    with local_portable_runner(str(tmp_path_factory.mktemp("beam-services")), worker_environment()) as services:
        yield services


@pytest.fixture(params=["in-process", "multi_processing", "portable"])
def runner(request):
    """``(pipeline flags, pids that must not encode)`` of each runner; None: the test's own
    process encodes (in-process DirectRunner)."""
    if request.param == "in-process":
        return (), None
    if request.param == "multi_processing":
        return MULTI_PROCESSING, set()
    return request.getfixturevalue("portable")


def assert_encoded_where_expected(probe_directory, forbidden):
    processes = encoding_processes(probe_directory)
    assert processes, "no process encoded anything"
    if forbidden is None:
        assert processes == {os.getpid()}, processes
    else:
        assert not processes & (forbidden | {os.getpid()}), processes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("beam") / "corpus")


@pytest.fixture(scope="module")
def single(tiny_model, corpus):
    """What the single-process commands give on the corpus: ``fit`` (one sentence per call, so
    each vector comes from the same input shape as in the pipeline), a whitening, and
    ``encode`` of each sentence file, keyed by (path, line)."""
    directory, model = corpus.parent, tiny_model[0]
    assert (
        run(
            "fit",
            "--model",
            model,
            "--batch-size",
            1,
            "--output",
            directory / "single.npz",
            corpus / "a.txt",
            corpus / "b.txt",
            corpus / "c.data",
        )
        == 0
    )
    assert run("fit", "--model", model, "--output", directory / "w.npz", corpus / "c.data", corpus / "a.txt") == 0
    encoded = []
    for name in ("a.txt", "b.txt"):
        path = str(corpus / name)
        assert (
            run(
                "encode",
                "--model",
                model,
                "--whitening",
                directory / "w.npz",
                "--output",
                directory / (name + ".npy"),
                path,
            )
            == 0
        )
        encoded += [((path, line), vector) for line, vector in enumerate(np.load(directory / (name + ".npy")), 1)]
    return Whitening.load(directory / "single.npz"), directory / "w.npz", encoded


def test_beam_fit_equals_fit(tiny_model, corpus, single, tmp_path, runner, probed):
    flags, services = runner
    assert (
        run(
            "beam-fit",
            "--model",
            tiny_model[0],
            "--batch-size",
            1,
            "--input",
            corpus / "*.txt",
            "--input",
            corpus / "c.data",
            "--output",
            tmp_path / "beam.npz",
            *flags,
        )
        == 0
    )
    assert_encoded_where_expected(probed, services)
    fitted, beamed = single[0], Whitening.load(tmp_path / "beam.npz")
    assert beamed.count == fitted.count == len(LINES) + 12
    assert (beamed.pooling, beamed.model_identity, beamed.rank) == (fitted.pooling, fitted.model_identity, fitted.rank)
    assert relative_error(beamed.mean, fitted.mean) <= 1e-9
    assert relative_error(covariance(beamed), covariance(fitted)) <= 1e-9
    assert fitted.rank == 24  # all directions are real: no arbitrary null-space columns to compare
    signs = np.sign((beamed.kernel * fitted.kernel).sum(axis=0))
    scale = np.abs(fitted.kernel).max(axis=0)
    assert (np.abs(beamed.kernel * signs - fitted.kernel) <= 1e-6 * scale).all()


def test_beam_encode_writes_every_line_once_and_equals_encode(tiny_model, corpus, single, tmp_path, runner, probed):
    flags, services = runner
    prefix = tmp_path / "out" / "vectors"
    assert (
        run(
            "beam-encode",
            "--model",
            tiny_model[0],
            "--whitening",
            single[1],
            "--input",
            corpus / "*.txt",
            "--input",
            corpus / "a.txt",
            "--input",
            corpus / ".." / "corpus" / "b.txt",  # overlapping
            "--num-shards",
            3,
            "--output",
            prefix,
            *flags,
        )
        == 0
    )
    assert_encoded_where_expected(probed, services)
    assert len(beam.FileSystems.match([beam.shards(str(prefix))])[0].metadata_list) == 3
    keys, vectors = beam.read_encoded(beam.shards(str(prefix)))
    assert keys == [key for key, _ in single[2]]  # each line once, none missing, none added
    np.testing.assert_allclose(vectors, np.array([v for _, v in single[2]]), atol=1e-5)


def test_workers_get_the_sentences_in_lists_of_sentences_per_call_sorted_by_length(workers_environment, tmp_path):
    """Grouped where the file is read, before the shuffle: on worker processes each call still gets
    `SENTENCES_PER_CALL` sentences (grouped after it, calls got a worker bundle's few dozen), cut
    from the sentences sorted by length: the calls' ranges of lengths do not overlap."""
    lines = ["%s %d\n" % ("w" * (i * 7919 % 97), i) for i in range(2 * beam.SENTENCES_PER_CALL + 100)]
    (tmp_path / "many.txt").write_text("".join(lines), encoding="utf-8")
    output = str(tmp_path / "sizes")

    def described(batch):
        lengths = [len(sentence) for _, sentence in batch]
        return "%d %d %d %d" % (len(batch), len({key for key, _ in batch}), min(lengths), max(lengths))

    def build(pipeline):
        batches = beam._sentences(pipeline, [str(tmp_path / "many.txt")], ReadOptions(format="lines"))
        return batches | "Describe" >> apache_beam.Map(described) | "Write" >> apache_beam.io.WriteToText(output)

    beam.run(build, MULTI_PROCESSING)
    written = [line for name in os.listdir(tmp_path) if name.startswith("sizes") for line in open(tmp_path / name)]
    calls = sorted([int(figure) for figure in line.split()] for line in written)
    per_call = [beam.SENTENCES_PER_CALL] * 2
    assert [sizes for *sizes, _, _ in calls] == [[100, 100], per_call, per_call]
    ranges = sorted((shortest, longest) for _, _, shortest, longest in calls)
    assert all(longest <= shortest for (_, longest), (shortest, _) in itertools.pairwise(ranges))


def sleeping_pipeline(seconds, output):
    """``build`` of a pipeline whose one step sleeps ``seconds`` on a worker, then writes a file."""

    def build(pipeline):
        slept = pipeline | "Seconds" >> apache_beam.Create([seconds]) | "Sleep" >> apache_beam.Map(time.sleep)
        return slept | "Write" >> apache_beam.io.WriteToText(output)

    return build


@pytest.fixture
def short_beam_default(monkeypatch):
    """Beam's default ``--job_server_timeout`` lowered from 300 s to 1 s (a job outliving it
    takes seconds, not minutes)."""
    from apache_beam.options.pipeline_options import PortableOptions

    beams = PortableOptions._add_argparse_args.__func__

    def lowered(cls, parser):
        beams(cls, parser)
        parser.set_defaults(job_server_timeout=1)

    monkeypatch.setattr(PortableOptions, "_add_argparse_args", classmethod(lowered))
    assert PortableOptions([]).job_server_timeout == 1


def test_a_portable_job_outlasts_beams_job_server_timeout(portable, short_beam_default, tmp_path):
    """Beam opens a portable job's state and message streams with --job_server_timeout, so a job
    longer than it ended in DEADLINE_EXCEEDED (seen on 100,000 sentences): `beam.run` gives the
    job `PORTABLE_JOB_TIMEOUT` instead."""
    beam.run(sleeping_pipeline(3, str(tmp_path / "slept")), portable[0])
    assert [name for name in os.listdir(tmp_path) if name.startswith("slept")]


# Beam's thread that reads the job's messages ends on the same deadline, with a traceback.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_given_job_server_timeout_is_kept(portable, short_beam_default, tmp_path):
    """Given, even at Beam's default, it is the user's."""
    with pytest.raises(Exception, match="DEADLINE_EXCEEDED|Deadline Exceeded"):
        beam.run(sleeping_pipeline(3, str(tmp_path / "slept")), (*portable[0], "--job_server_timeout", "1"))
    for thread in threading.enumerate():  # its traceback belongs to this test, not the next
        if thread.name == "wait_until_finish_read":
            thread.join(30)


def test_a_job_endpoint_that_does_not_answer_is_refused_in_one_line(tiny_model, corpus, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(beam, "JOB_ENDPOINT_TIMEOUT", 1)
    monkeypatch.setattr(beam, "PORTABLE_JOB_TIMEOUT", 20)  # how long Beam itself would wait
    endpoint = "localhost:%d" % beam_portable._free_port()
    started = time.monotonic()
    code = run(
        "beam-fit",
        "--model",
        tiny_model[0],
        "--input",
        corpus / "a.txt",
        "--output",
        tmp_path / "w.npz",
        "--runner",
        "PortableRunner",
        "--job_endpoint",
        endpoint,
    )
    assert code == 1 and time.monotonic() - started < 30
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.levelname != "INFO"] == [
        ("ERROR", "--job_endpoint %s: no job service answered within 1 s" % endpoint)
    ]
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    "flags",
    [(), MULTI_PROCESSING, ("--runner", "apache_beam.runners.direct.direct_runner.DirectRunner")],
    ids=["in-process", "multi_processing", "class-path"],
)
def test_the_direct_runner_never_tries_prism(flags, workers_environment, monkeypatch, tmp_path):
    """Beam's DirectRunner first submits a pipeline to Prism, a binary it downloads at run time
    (offline it falls back): the commands' DirectRunner is the FnApiRunner, which the other
    tests check."""
    from apache_beam.runners.portability import prism_runner

    tried = []
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", lambda *arguments: tried.append(arguments))
    beam.run(sleeping_pipeline(0, str(tmp_path / "slept")), flags)
    assert not tried
    assert [name for name in os.listdir(tmp_path) if name.startswith("slept")]
