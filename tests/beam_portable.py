"""Beam's portable runner on this machine: a Python job service and an EXTERNAL worker pool.

What docs/beam.md's PortableRunner section starts by hand, as one context manager, for trying
the portable runner locally (tests/integration/test_beam_runners.py, benchmarks/bench_beam.py):

    with local_portable_runner(directory) as (flags, pids):
        encode_on_runner(inputs, config, output, flags=flags)

Both services listen on loopback, each in a process group of its own, and are stopped (with
the workers the pool started) when the block ends. The pool starts its workers as ``python``:
``environment`` must put an interpreter that can import this package first on PATH and carry a
PYTHONPATH that reaches whatever the pipeline pickles by reference.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

START_TIMEOUT = 60


@contextlib.contextmanager
def local_portable_runner(directory, environment=None):
    """``(pipeline flags, pids of the two services)``; their logs and staging go to ``directory``.

    ``environment`` defaults to this process's, with this interpreter's directory first on PATH.
    """
    if environment is None:
        environment = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    services = []

    def start(module, *arguments):
        log = os.path.join(directory, module.rsplit(".", 1)[1] + ".log")
        with open(log, "w") as stream:
            services.append(
                subprocess.Popen(
                    [sys.executable, "-m", module, *arguments],
                    env=environment,
                    stdout=stream,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        return services[-1], log

    try:
        pool_port = _free_port()
        pool, log = start("apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port))
        _wait_for(lambda: _listening(pool_port), pool, "the worker pool", log)
        port_file = os.path.join(directory, "job.port")
        job, log = start(
            "apache_beam.runners.portability.local_job_service_main",
            "--port",
            "0",
            "--port_file",
            port_file,
            "--staging_dir",
            os.path.join(directory, "staging"),
        )
        _wait_for(lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0, job, "the job service", log)
        with open(port_file) as stream:
            job_port = stream.read()
        flags = (
            "--runner",
            "PortableRunner",
            "--job_endpoint",
            "localhost:%s" % job_port,
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            "localhost:%d" % pool_port,
            # The workers share this interpreter's packages: no list of them to stage (Beam
            # would run `pip freeze`, which a uv-made environment lacks, and warn).
            "--experiments",
            "disable_logging_submission_environment",
        )
        yield flags, {pool.pid, job.pid}
    finally:
        for service in reversed(services):
            _stop(service)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port):
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _wait_for(ready, process, what, log):
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            with open(log) as stream:
                raise RuntimeError("%s did not start (exit %s):\n%s" % (what, process.poll(), stream.read()))
        time.sleep(0.2)


def _stop(process):
    """SIGTERM to the service's process group (it and the workers it started), SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
            return
