"""Both Beam pipelines in separate worker processes, as a cluster runs them.

The in-process DirectRunner of test_beam.py never pickles `EncodeFn` or `WhiteningStatsFn` to
another process nor runs ``setup`` in a fresh one. Here the same commands run on
- DirectRunner with ``--direct_running_mode multi_processing --direct_num_workers 2``: SDK
  workers started as subprocesses of the test;
- PortableRunner against Beam's Python local job service, with ``--environment_type EXTERNAL``
  workers from ``worker_pool_main``: the job service and the worker pool are processes that the
  fixture starts on loopback ports, and the pool starts one process per worker.
`ProbedEncodeFn` records the id of every process that encodes, so each test proves the
vectors were made outside the test's own process, and the results are checked as in
test_beam.py against the single-process ``fit`` and ``encode``.
"""
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from test_beam import LINES, corpus, covariance  # noqa: F401  corpus: the fixture

from bert_whitening import beam
from bert_whitening.whitening import Whitening

from helpers import relative_error, run

pytestmark = pytest.mark.slow

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
START_TIMEOUT = 60
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
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path),
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """Encoding through `ProbedEncodeFn`; returns the directory of the process ids it records."""
    directory = tmp_path / "probe"
    directory.mkdir()
    for name, value in worker_environment().items():  # for the workers DirectRunner starts
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(beam, "EncodeFn", functools.partial(ProbedEncodeFn, probe_directory=str(directory)))
    return directory


def encoding_processes(directory):
    return {int(name) for name in os.listdir(directory)}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(ready, process, what, log):
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("%s did not start (exit %s):\n%s" % (what, process.poll(), log.read_text()))
        time.sleep(0.2)


def listening(port):
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def stop(process):
    """SIGTERM to the service's process group (it and the workers it started), SIGKILL after
    10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
            return


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """``(flags, service pids)``: a Python local job service and an EXTERNAL worker pool on
    loopback, each in a process group of its own, killed at teardown."""
    directory = tmp_path_factory.mktemp("beam-services")
    environment = worker_environment()
    services = []

    def start(module, *arguments):
        log = directory / (module.rsplit(".", 1)[1] + ".log")
        with open(log, "w") as stream:
            services.append(subprocess.Popen(
                [sys.executable, "-m", module, *arguments], env=environment, stdout=stream,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        return services[-1], log

    try:
        pool_port = free_port()
        pool, log = start("apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port))
        wait_for(lambda: listening(pool_port), pool, "the worker pool", log)
        port_file = directory / "job.port"
        job, log = start("apache_beam.runners.portability.local_job_service_main", "--port", "0",
                         "--port_file", str(port_file), "--staging_dir", str(directory / "staging"))
        wait_for(port_file.exists, job, "the job service", log)
        flags = ("--runner", "PortableRunner", "--job_endpoint", "localhost:%s" % port_file.read_text(),
                 "--environment_type", "EXTERNAL", "--environment_config", "localhost:%d" % pool_port)
        yield flags, {pool.pid, job.pid}
    finally:
        for service in reversed(services):
            stop(service)


@pytest.fixture(params=["multi_processing", "portable"])
def runner(request):
    """``(pipeline flags, pids that must not encode)`` of each separate-process runner."""
    if request.param == "multi_processing":
        return MULTI_PROCESSING, set()
    return request.getfixturevalue("portable")


def assert_encoded_elsewhere(probe_directory, forbidden):
    processes = encoding_processes(probe_directory)
    assert processes, "no process encoded anything"
    assert not processes & (forbidden | {os.getpid()}), processes


def test_beam_fit_in_worker_processes_equals_fit(tiny_model, corpus, tmp_path, runner, probed):  # noqa: F811
    flags, services = runner
    model = tiny_model[0]
    assert run("fit", "--model", model, "--batch-size", 1, "--output", tmp_path / "single.npz",
               corpus / "a.txt", corpus / "b.txt", corpus / "c.data") == 0
    assert not encoding_processes(probed)  # the single-process fit is not probed
    assert run("beam-fit", "--model", model, "--batch-size", 1, "--input", corpus / "*.txt",
               "--input", corpus / "c.data", "--output", tmp_path / "beam.npz", *flags) == 0
    assert_encoded_elsewhere(probed, services)
    single, beamed = Whitening.load(tmp_path / "single.npz"), Whitening.load(tmp_path / "beam.npz")
    assert beamed.count == single.count == len(LINES) + 12
    assert (beamed.pooling, beamed.model_identity, beamed.rank) == (single.pooling, single.model_identity, single.rank)
    assert relative_error(beamed.mean, single.mean) <= 1e-9
    assert relative_error(covariance(beamed), covariance(single)) <= 1e-9


def test_beam_encode_in_worker_processes_equals_encode(tiny_model, corpus, tmp_path, runner, probed):  # noqa: F811
    flags, services = runner
    model = tiny_model[0]
    whitening = tmp_path / "w.npz"
    assert run("fit", "--model", model, "--output", whitening, corpus / "c.data", corpus / "a.txt") == 0
    prefix = tmp_path / "out" / "vectors"
    assert run("beam-encode", "--model", model, "--whitening", whitening, "--input", corpus / "*.txt",
               "--num-shards", 2, "--output", prefix, *flags) == 0
    assert_encoded_elsewhere(probed, services)
    keys, vectors = beam.read_encoded(beam.shards(str(prefix)))
    expected = []
    for name in ("a.txt", "b.txt"):
        path = str(corpus / name)
        assert run("encode", "--model", model, "--whitening", whitening, "--output",
                   tmp_path / (name + ".npy"), path) == 0
        expected += [((path, line), vector) for line, vector in enumerate(np.load(tmp_path / (name + ".npy")), 1)]
    assert keys == [key for key, _ in expected]  # each line once, none missing, none added
    np.testing.assert_allclose(vectors, np.array([v for _, v in expected]), atol=1e-5)
