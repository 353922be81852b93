"""The process's precision: how the model's matrix products run, float32 or bfloat16.

The one rule: precision is a property of the process, not of a call. In ``bfloat16`` a
`bert_whitening.layers.FusedBert` is traced with its matrix products in bfloat16 (its weights and
activations rounded at each product) and everything else (the residual sums, layer norms,
softmax, pooling, whitening) in float32, so its accuracy does not depend on which ops a rewrite
pass reaches; a model FusedBert does not cover (NEZHA, RoFormer, ...) runs under oneDNN's
automatic mixed precision instead, a Grappler rewrite of the process's graphs
(`bert_whitening.encoding` picks the graph). Either is faster only on CPUs with bfloat16
instructions (AVX512_BF16 or AMX); benchmarks/bench_encode.py prints its speed and accuracy
(docs/performance.md). `set_precision` chooses it once, before anything is encoded: the commands
call it with ``--precision``, and Beam's ``EncodeFn.setup`` in each worker. Changing it later is
refused, since another thread may be encoding. `precision_scope` switches it for one block and
restores it, for single-threaded comparisons in tests and benchmarks only.

``auto`` (the commands' default) decides on the first call that encodes (`resolve_auto`):
float32 on a CPU without bfloat16 instructions; otherwise up to `AUTO_CHECK_SENTENCES` distinct
sentences of that call are encoded in both precisions by the caller's encoder (whitening
included: a whitening fitted on few sentences amplifies bfloat16's rounding) and bfloat16 is kept
only if there are at least `AUTO_MIN_DISTINCT` of them and every vector is within cosine
`AUTO_MIN_COSINE` of its float32 vector (a check on a few sentences, or on one sentence
repeated, bounds nothing). A process that fits a whitening or a flow on the vectors it encodes
(``fit``, ``eval``, ``eval-retrieval``, ``beam-fit``: `fits_its_vectors`) decides float32 before it
encodes (`resolve_before_fitting`): its check would run before the fit that then scales bfloat16's
rounding up, by as much as the smallest eigenvalue it keeps allows. The choice is logged once and
then holds for the process. A Python program that never calls `set_precision` encodes in
float32.

numpy only: the commands set the precision before TensorFlow is imported.
"""

import contextlib
import dataclasses
import functools
import logging
import os
import threading

from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE, PRECISIONS, check_choice
from bert_whitening.vectors import l2_normalize

logger = logging.getLogger(__name__)

#: ``auto`` keeps bfloat16 only if every vector of its check is within this cosine of float32.
AUTO_MIN_COSINE = 0.999
#: Distinct sentences ``auto`` encodes in both precisions before choosing, at most ...
AUTO_CHECK_SENTENCES = 256
#: ... and at least: with fewer, it keeps float32.
AUTO_MIN_DISTINCT = 64

_process_precision = None
#: The precision models run in now: the process's, or a `precision_scope`'s.
_running_precision = "float32"
_auto_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _cpuinfo():
    """/proc/cpuinfo's text (its flags); None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as stream:
            return stream.read()
    except OSError:
        return None


def _cpu_lists_any(*flags):
    """Whether /proc/cpuinfo lists any of ``flags``; None where it cannot be read."""
    listed = _cpuinfo()
    return None if listed is None else any(flag in listed for flag in flags)


def cpu_has_bfloat16():
    """Whether /proc/cpuinfo lists AVX512_BF16 or AMX-BF16; None where it cannot be read."""
    return _cpu_lists_any("avx512_bf16", "amx_bf16")


def cpu_has_amx():
    """Whether /proc/cpuinfo lists AMX-BF16 (Intel's tile instructions, which oneDNN runs bfloat16
    products on only with weights it may keep: `bert_whitening.commands.base.weights_frozen`); None where
    it cannot be read."""
    return _cpu_lists_any("amx_bf16")


def _apply(precision):
    """Run models in ``precision`` from now on; ``auto`` runs float32 until it has chosen."""
    global _running_precision
    check_choice("precision", precision, PRECISIONS)
    if precision == "bfloat16" and cpu_has_bfloat16() is False:
        logger.warning(
            "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): TensorFlow "
            "emulates them, so --precision bfloat16 is likely slower than float32"
        )
    _running_precision = "bfloat16" if precision == "bfloat16" else "float32"


def set_precision(precision):
    """Choose, once per process, how the model's matrix products run (see the module docstring).
    Setting the same value again, or ``auto`` once a precision is set, does nothing; another value
    is refused."""
    global _process_precision
    check_choice("precision", precision, PRECISIONS)
    if precision == "auto" and _process_precision is not None:
        return
    if _process_precision not in (None, "auto") and precision != _process_precision:
        raise BertWhiteningError(
            "this process already encodes in %s; precision is chosen once "
            "per process (got %s)" % (_process_precision, precision)
        )
    _apply(precision)
    _process_precision = precision


def process_precision():
    """The process's precision: ``float32`` or ``bfloat16`` once chosen, ``auto`` while pending,
    None if never set (float32)."""
    return _process_precision


def running():
    """The precision models run in now: ``float32`` or ``bfloat16``."""
    return _running_precision


def auto_precision(has_bfloat16, float32_vectors, bfloat16_vectors=None):
    """``auto``'s choice and why, from the CPU and a check sample's vectors in both precisions
    (``bfloat16_vectors`` unused, and may be None, on a CPU without bfloat16)."""
    if not has_bfloat16:
        return "float32", "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)"
    cosines = (l2_normalize(float32_vectors) * l2_normalize(bfloat16_vectors)).sum(axis=1)
    lowest = float(cosines.min())
    if lowest >= AUTO_MIN_COSINE:
        return "bfloat16", "every vector of %d check sentences within cosine %.6f of float32" % (
            len(cosines),
            lowest,
        )
    return "float32", "bfloat16 moved a check vector to cosine %.6f of float32 (below %g)" % (lowest, AUTO_MIN_COSINE)


def resolve_auto(sample, check_vectors):
    """Replace a pending ``auto`` by its choice: ``sample`` are the check's distinct sentences
    (their token ids), and ``check_vectors(sample)`` gives their vectors in the running
    precision, called once in each (on a CPU with bfloat16, on enough sentences)."""
    if _process_precision != "auto":
        return
    with _auto_lock:
        if _process_precision != "auto":
            return
        has_bfloat16 = bool(cpu_has_bfloat16())
        if has_bfloat16 and len(sample) < AUTO_MIN_DISTINCT:
            _decide(
                "float32",
                "only %d distinct sentences to check bfloat16 on, fewer than %d" % (len(sample), AUTO_MIN_DISTINCT),
            )
            return
        float32_vectors = bfloat16_vectors = None
        if has_bfloat16:
            float32_vectors = check_vectors(sample)
            with precision_scope("bfloat16"):
                bfloat16_vectors = check_vectors(sample)
        _decide(*auto_precision(has_bfloat16, float32_vectors, bfloat16_vectors))


def resolve_before_fitting():
    """Replace a pending ``auto`` by float32 in a process about to fit a whitening or a flow on
    the vectors it encodes (module docstring: no check before the fit bounds what it does to
    bfloat16's rounding). ``--precision bfloat16`` still runs bfloat16."""
    if _process_precision != "auto":
        return
    with _auto_lock:
        if _process_precision == "auto":
            _decide(
                "float32",
                "the vectors it encodes are fitted on, and no check before the fit bounds how far the fit "
                "scales bfloat16's rounding up (--precision bfloat16 runs it anyway)",
            )


#: The commands whose every run fits a whitening or a flow on the vectors it encodes ...
FITTING_COMMANDS = ("fit", "beam-fit")
#: ... and those that do when one of their settings whitens (``n_components`` other than 0, raw).
EVALUATING_COMMANDS = ("eval", "eval-retrieval")


def fits_its_vectors(command, n_components=()):
    """Whether a run of ``command`` fits a whitening or a flow on the vectors it encodes, so that
    a pending ``auto`` is decided float32 before it encodes (`resolve_before_fitting`). Here,
    with the numbers alone, so that the command line knows it before TensorFlow and without
    importing evaluation (scipy)."""
    return command in FITTING_COMMANDS or (command in EVALUATING_COMMANDS and any(n_components))


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a command's process runs in: ``precision``, what `set_precision` is given (``auto``
    still pending); ``float32_before_fitting``, whether a pending ``auto`` is decided float32
    before the vectors are fitted on (`fits_its_vectors`); ``frozen_weights``, whether its
    process may promise oneDNN that its weights never change."""

    precision: str
    float32_before_fitting: bool
    frozen_weights: bool


def decide(command, precision, weights_read_only, n_components=(), methods=("whitening",)):
    """The one precision decision of a command (``command`` as typed, its ``--precision``, its
    record's ``weights_read_only``, its ``n_components`` settings and ``methods``): the weights
    are promised frozen where bfloat16 may run (``auto`` runs float32 where the vectors are
    fitted on) on a CPU with AMX, in a command that changes no weight, and never where a flow
    is trained: the promise cannot be taken back in a process. Elsewhere, or in float32, the
    kept copies cost a copy of the weights and gain nothing measured (docs/performance.md)."""
    before_fitting = precision == "auto" and fits_its_vectors(command, n_components)
    may_run_bfloat16 = precision == "bfloat16" or (precision == "auto" and not before_fitting)
    frozen = weights_read_only and "flow" not in methods and may_run_bfloat16 and bool(cpu_has_amx())
    return Decision(precision, before_fitting, frozen)


def _decide(chosen, why):
    global _process_precision
    _apply(chosen)
    _process_precision = chosen
    logger.debug("--precision auto chose %s: %s", chosen, why)  # recorded by what it writes (-v says why)


@contextlib.contextmanager
def precision_scope(precision):
    """Inside the block the process encodes in ``precision``; restored afterwards. For
    single-threaded comparisons (tests, benchmarks): the precision is process-wide."""
    _apply(precision)
    try:
        yield
    finally:
        _apply(_process_precision or "float32")


def refuse_frozen_weights(what, error=BertWhiteningError):
    """Refuse to train (``what``) in a process that promises oneDNN its weights never change
    (`FROZEN_WEIGHTS_VARIABLE` set, say in a shell set up for a server): oneDNN would keep each
    product's first weights and the run would train on stale ones without a word."""
    value = os.environ.get(FROZEN_WEIGHTS_VARIABLE, "")
    if value not in ("", "0"):
        raise error(
            "%s=%s promises oneDNN that weights never change, and %s changes them: unset it for this run"
            % (FROZEN_WEIGHTS_VARIABLE, value, what)
        )
