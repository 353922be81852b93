"""The one progress report of every long loop: a tqdm bar on a terminal, a log line otherwise.

A command run off a terminal (a job's log, a pipe) showed nothing while it worked, or a bar
redrawn with carriage returns that a log file keeps as one endless line. `Progress` draws the
bar on a terminal and, anywhere else, logs one line at least every `PROGRESS_SECONDS` (stage,
done / total where known, rate, time left where known), from a thread of its own as well, so
that a step that takes long (one batch, a fresh process's verification) still shows the
command alive. Standard library only: tqdm is imported when a bar is drawn.
"""

import contextlib
import logging
import sys
import threading
import time

logger = logging.getLogger("bert_whitening")

#: Seconds between two progress lines off a terminal; the thread looks every `_POLL_SECONDS`,
#: so no two lines are further apart than their sum.
PROGRESS_SECONDS = 10.0
_POLL_SECONDS = 1.0
#: What a `Progress` reads the time from, unless given a clock of its own (tests set a fake one).
CLOCK = time.monotonic


def on_terminal(stream=None):
    """Whether ``stream`` (standard error by default) is a terminal, where a bar is drawn."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, OSError, ValueError):  # closed, or no file behind it
        return False


class Progress:
    """Progress of one stage: ``update(n)`` as work is done, ``set_postfix`` for figures of the
    last step, ``close`` (or the ``with`` block) at its end.

    ``show``: True draws a bar wherever standard error goes, False reports nothing, None (the
    default) draws a bar on a terminal and logs lines otherwise (at INFO: neither once the log
    says errors alone, ``-q``). ``unit`` None: a stage of no
    counts (a wait on another process), its lines saying the time it has taken, no bar drawn.
    ``clock`` is what time is read from (`CLOCK` if None).
    """

    def __init__(self, stage, total=None, unit="sent", show=None, leave=False, clock=None):
        clock = clock or CLOCK
        self.stage, self.total, self.unit, self.n = stage, total, unit, 0
        self._clock, self._postfix, self._lock = clock, {}, threading.Lock()
        self._started = self._last = clock()
        self._logged, self._stop, self._thread, self._bar = False, threading.Event(), None, None
        quiet = logger.getEffectiveLevel() >= logging.ERROR  # -q: errors alone
        drawn = show or (show is None and not quiet and on_terminal())
        if drawn and unit is not None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit=unit, desc=stage, leave=leave, disable=False)
        elif not drawn and show is None and logger.isEnabledFor(logging.INFO):
            self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._thread.start()

    def update(self, n=1):
        with self._lock:
            self.n += n
        if self._bar is not None:
            self._bar.update(n)
        else:
            self._log_if_due()

    def set_postfix(self, refresh=True, **values):
        """Figures of the last step (``loss=0.1234``), shown after the counts."""
        with self._lock:
            self._postfix = {name: str(value) for name, value in values.items()}
        if self._bar is not None:
            self._bar.set_postfix(refresh=refresh, **values)

    def close(self):
        """End the stage: the bar closed, or (if lines were logged) one last line of the whole."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._logged:
                logger.info("%s", self.line(done=True))
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def line(self, done=False):
        """``stage: done/total unit (share), rate unit/s, ETA s, elapsed s[, figures]``, with what
        is known; ``stage done: ...`` for the stage's last line."""
        stage = self.stage + (" done" if done else "")
        with self._lock:
            done, postfix = self.n, dict(self._postfix)
        elapsed = max(self._clock() - self._started, 0.0)
        if self.total:
            parts = ["%d/%d %s (%.0f%%)" % (done, self.total, self.unit, 100.0 * done / self.total)]
        else:
            parts = ["%d %s" % (done, self.unit)] if self.unit else []
        if done and elapsed > 0 and self.unit:
            rate = done / elapsed
            parts.append("%.1f %s/s" % (rate, self.unit))
            if self.total and done < self.total:
                parts.append("ETA %.0f s" % ((self.total - done) / rate))
        parts.append("%.0f s elapsed" % elapsed)
        parts.extend("%s=%s" % item for item in postfix.items())
        return "%s: %s" % (stage, ", ".join(parts))

    def _log_if_due(self):
        with self._lock:
            now = self._clock()
            if now - self._last < PROGRESS_SECONDS:
                return
            self._last, self._logged = now, True
        logger.info("%s", self.line())

    def _beat(self):
        while not self._stop.wait(_POLL_SECONDS):
            self._log_if_due()


@contextlib.contextmanager
def progress_of(progress, stage, total=None, unit="sent"):
    """``progress`` itself when it is a bar (anything with ``update``: a `Progress`, a tqdm bar),
    left open for its owner; else a `Progress` of ``stage`` shown as ``progress`` (True, False or
    None) says, closed at the end of the block."""
    if hasattr(progress, "update"):
        yield progress
        return
    with Progress(stage, total, unit, show=progress) as made:
        yield made
