"""Alive and quiet: off a terminal a long command logs a progress line at least every 15 s (of
an injected clock: no test here waits on real time to pass or fail), on a terminal it draws a
bar; ``-q`` leaves errors alone, and what the user need not act on is logged at DEBUG."""

import contextlib
import logging
import re
import threading

import pytest

from bert_whitening import cli, encoding, precision, progress
from bert_whitening.names import PRECISION_VARIABLE
from bert_whitening.progress import Progress, progress_of

from helpers import SENTENCES

#: What a progress line holds: its stage, then its counts, and the (fake) seconds it has taken.
LINE = re.compile(r"^INFO: (?P<stage>[^:]+): .*?(?P<elapsed>\d+) s elapsed")


class FakeClock:
    """Seconds that pass only when the test says (thread-safe: the progress thread reads it)."""

    def __init__(self):
        self.now, self._lock = 0.0, threading.Lock()

    def __call__(self):
        with self._lock:
            return self.now

    def advance(self, seconds):
        with self._lock:
            self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(progress, "CLOCK", fake)
    return fake


@pytest.fixture
def own_log(monkeypatch):
    """The root logger as a fresh process finds it (no handler), so that `cli.main` sets up its
    own log, at the level its options say; pytest's handlers and level are put back afterwards."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(logging.getLogger("apache_beam"), "level", logging.NOTSET)


def command_log(tmp_path, *argv):
    """``bert-whitening ARGV`` in this process with standard error a file (no terminal), its
    log set up by `cli.main` as in a process of its own (`own_log`): its exit status and the
    lines of that file."""
    logging.getLogger().handlers.clear()  # the last run's handler, on the file it wrote
    path = tmp_path / "stderr.txt"
    with open(path, "w", encoding="utf-8") as stderr, contextlib.redirect_stderr(stderr):
        status = cli.main([str(item) for item in argv])
    logging.getLogger().handlers.clear()
    return status, path.read_text(encoding="utf-8").splitlines()


def slowed_batches(monkeypatch, clock, seconds):
    """Each model call of `encoding` takes ``seconds`` of the fake clock."""
    in_flight = encoding.in_flight

    def slow(call, items, width):
        for result in in_flight(call, items, width):
            clock.advance(seconds)
            yield result

    monkeypatch.setattr(encoding, "in_flight", slow)


def assert_alive(lines, stage, end):
    """A line of ``stage`` at least every 15 s from its start to ``end`` (its last line, ``stage
    done``, at the end); the (fake) seconds of each."""
    stages = (stage, stage + " done")
    times = [int(match["elapsed"]) for match in map(LINE.match, lines) if match and match["stage"] in stages]
    assert times, lines
    gaps = [later - earlier for earlier, later in zip([0, *times], [*times, end], strict=True)]
    assert max(gaps) <= 15, (gaps, lines)
    return times


def test_encode_off_a_terminal_logs_a_progress_line_at_least_every_15_seconds(
    tiny_model, tmp_path, monkeypatch, clock, own_log
):
    slowed_batches(monkeypatch, clock, 4.0)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES * 2) + "\n", encoding="utf-8")
    argv = ["encode", "--model", tiny_model[0], "--precision", "float32", "--batch-size", "2"]
    status, lines = command_log(tmp_path, *argv, "--output", tmp_path / "v.npy", tmp_path / "in.txt")
    assert status == 0, lines
    batches = -(-2 * len(SENTENCES) // 2)
    times = assert_alive(lines, "encoding", 4 * batches)
    assert times[-1] == 4 * batches
    assert any(line.startswith("INFO: encoding done: %d sent" % (2 * len(SENTENCES))) for line in lines), lines
    assert not any("\r" in line for line in lines)  # no bar drawn into the file


def test_a_stage_without_updates_still_logs_from_its_thread(monkeypatch, clock, caplog):
    """A wait on another process (export's verification) advances no count: the thread logs."""
    monkeypatch.setattr(progress, "_POLL_SECONDS", 0.001)
    monkeypatch.setattr(progress, "on_terminal", lambda stream=None: False)

    class Seen(logging.Handler):
        logged = threading.Event()

        def emit(self, record):
            self.logged.set()

    seen = Seen()
    progress.logger.addHandler(seen)
    try:
        with caplog.at_level(logging.INFO, logger="bert_whitening"), Progress("verifying", unit=None) as waiting:
            clock.advance(progress.PROGRESS_SECONDS)
            assert seen.logged.wait(60)  # a deadline for a thread to run, not a measure of time
            assert waiting.line() == "verifying: 10 s elapsed"
    finally:
        progress.logger.removeHandler(seen)
    assert caplog.messages == ["verifying: 10 s elapsed", "verifying done: 10 s elapsed"]


def test_a_line_says_done_of_total_rate_time_left_and_the_last_figures(clock):
    with Progress("epoch 1/2", total=40, unit="pair", show=False) as bar:
        clock.advance(5)
        bar.update(10)
        bar.set_postfix(loss="0.5000")
        assert bar.line() == "epoch 1/2: 10/40 pair (25%), 2.0 pair/s, ETA 15 s, 5 s elapsed, loss=0.5000"
        clock.advance(15)
        bar.update(30)
        assert bar.line(done=True) == "epoch 1/2 done: 40/40 pair (100%), 2.0 pair/s, 20 s elapsed, loss=0.5000"
    with Progress("encoding", show=False) as bar:
        bar.update(3)
        assert bar.line() == "encoding: 3 sent, 0 s elapsed"


def test_lines_are_logged_only_once_every_progress_seconds(monkeypatch, clock, caplog):
    monkeypatch.setattr(progress, "on_terminal", lambda stream=None: False)
    monkeypatch.setattr(progress, "_POLL_SECONDS", 3600)  # the thread never looks: updates alone
    with caplog.at_level(logging.INFO, logger="bert_whitening"):
        with Progress("encoding", total=100) as bar:
            for _ in range(25):
                clock.advance(1)
                bar.update(4)
    assert caplog.messages == [
        "encoding: 40/100 sent (40%), 4.0 sent/s, ETA 15 s, 10 s elapsed",
        "encoding: 80/100 sent (80%), 4.0 sent/s, ETA 5 s, 20 s elapsed",
        "encoding done: 100/100 sent (100%), 4.0 sent/s, 25 s elapsed",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bert_whitening"), Progress("encoding", total=100) as bar:
        clock.advance(9)
        bar.update(100)
    assert caplog.messages == []  # a stage shorter than PROGRESS_SECONDS says nothing


def test_on_a_terminal_a_bar_is_drawn_and_no_line_logged(monkeypatch, clock, caplog, capsys):
    monkeypatch.setattr(progress, "on_terminal", lambda stream=None: True)
    with caplog.at_level(logging.INFO, logger="bert_whitening"), Progress("encoding", total=4) as bar:
        clock.advance(60)
        bar.update(4)
    assert caplog.messages == []
    assert "encoding" in capsys.readouterr().err
    with caplog.at_level(logging.ERROR, logger="bert_whitening"), Progress("encoding", total=4) as bar:
        bar.update(4)  # -q: no bar either
    assert capsys.readouterr().err == ""


def test_a_bar_given_is_advanced_and_left_open_for_its_owner():
    class Bar:
        n, closed = 0, False

        def update(self, done):
            self.n += done

        def close(self):
            self.closed = True

    given = Bar()
    with progress_of(given, "encoding") as bar:
        bar.update(3)
    assert bar is given and given.n == 3 and not given.closed
    with progress_of(False, "encoding", 3) as bar:
        assert isinstance(bar, Progress) and bar.total == 3


@pytest.mark.parametrize(
    "argv, level",
    [
        ([], "INFO"),
        (["-v"], "DEBUG"),
        (["-q"], "ERROR"),
        (["--quiet"], "ERROR"),
        (["--verbose"], "DEBUG"),
        (["-q", "-v"], "DEBUG"),  # the last given stands
        (["--log-level", "WARNING"], "WARNING"),
    ],
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_v_and_q_set_the_log_level_before_the_command_or_among_its_options(argv, level, where):
    command = ["encode", "--output", "v.npy", "in.txt"]
    args = cli.build_parser().parse_args(argv + command if where == "before" else command + argv)
    assert args.log_level == level


@pytest.fixture
def fresh_precision(monkeypatch):
    """The precision as a new command finds it (never set); the process's own put back after."""
    monkeypatch.delenv(PRECISION_VARIABLE, raising=False)
    yield lambda: monkeypatch.setattr(precision, "_process_precision", None)
    monkeypatch.undo()
    precision._apply(precision._process_precision or "float32")


def test_quiet_by_default_v_says_more_and_q_only_errors(tmp_path, own_log, fresh_precision):
    """What the user need not act on (the built-in model taken, auto's choice) is DEBUG: -v
    says it, the default says nothing of it, -q nothing but an error."""
    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf-8")
    said = {}
    for flags in ([], ["-v"]):
        fresh_precision()
        output = tmp_path / ("v%d.npy" % len(flags))
        status, said[bool(flags)] = command_log(tmp_path, *flags, "encode", "--output", output, tmp_path / "in.txt")
        assert status == 0, said[bool(flags)]
    assert not any("no --model given" in line or "--precision auto" in line for line in said[False]), said[False]
    assert any(line.startswith("DEBUG: no --model given: using the built-in") for line in said[True]), said[True]
    assert any(line.startswith("DEBUG: --precision auto chose ") for line in said[True]), said[True]
    status, quiet = command_log(tmp_path, "-q", "encode", "--output", tmp_path / "w.npy", tmp_path / "in.txt")
    assert status == 0 and quiet == []
    status, quiet = command_log(tmp_path, "-q", "encode", "--output", tmp_path / "x.npy", tmp_path / "absent.txt")
    assert status == 1 and len(quiet) == 1 and quiet[0].startswith("ERROR: "), quiet
