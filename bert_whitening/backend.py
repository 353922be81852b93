"""The one place that chooses the Keras implementation and imports TensorFlow and bert4keras.

bert4keras 0.11.5 reads ``TF_KERAS`` when it is first imported, and TensorFlow 2.16+ reads
``TF_USE_LEGACY_KERAS`` when ``tf.keras`` is first touched; both must be set before either import,
so every module of this package takes ``tf``, ``keras`` and the bert4keras helpers from here.
The bert4keras helpers are imported when first asked for.

TensorFlow prints start-up lines (oneDNN, CUDA probing) from C++ before its log level applies.
Unless ``TF_CPP_MIN_LOG_LEVEL`` is set below 3, the C++ log level is set to 3 and those lines
are swallowed while TensorFlow is imported (and shown if the import fails). Set
``TF_CPP_MIN_LOG_LEVEL=0`` to see everything.
"""

import contextlib
import logging
import os
import platform
import sys
import tempfile
import warnings

os.environ["TF_KERAS"] = "1"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
if platform.machine().lower() in ("x86_64", "amd64"):
    # TensorFlow runs oneDNN's kernels by default only on x86 CPUs with AVX512_VNNI or later; on
    # one with AVX2 only they encode and train faster as well (docs/performance.md). A value set
    # in the environment is kept.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_QUIET = os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"


@contextlib.contextmanager
def _stderr_swallowed(enabled):
    """Send file descriptor 2 to a temporary file; replay it if the block fails (an exception,
    not a signal's KeyboardInterrupt: the lines would not explain a stop the user asked for)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except Exception:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


with _stderr_swallowed(_QUIET):
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    logging.getLogger("absl").setLevel(logging.WARNING)  # e.g. SavedModel input renaming notes

keras = tf.keras

# bert4keras shares one unseeded initializer across layers; tf-keras warns about it on every
# model build. The weights come from the checkpoint, so the warning is noise here.
warnings.filterwarnings("ignore", message="The initializer .* is unseeded", category=UserWarning)

if not keras.__name__.startswith("tf_keras"):  # pragma: no cover - depends on import order
    raise ImportError(
        "tf.keras resolved to %s, not tf-keras (Keras 2). TensorFlow was imported and tf.keras "
        "used before bert_whitening could set TF_USE_LEGACY_KERAS=1: import bert_whitening first, "
        "or set TF_USE_LEGACY_KERAS=1 in the environment." % keras.__name__
    )

#: The names taken from bert4keras, imported on first use: a process that only loads a SavedModel
#: (the export's verification child, as a server) needs TensorFlow alone and starts sooner
#: without bert4keras' import (see docs/performance.md).
_BERT4KERAS_NAMES = (
    "build_transformer_model",
    "ARCHITECTURES",
    "Tokenizer",
    "load_vocab",
)

__all__ = ["tf", "keras", *_BERT4KERAS_NAMES, "graph_function"]


def _import_bert4keras():
    """bert4keras' names (`_BERT4KERAS_NAMES`); ``ARCHITECTURES`` maps the architectures of
    `bert_whitening.names.MODEL_TYPES` to its classes."""
    keras_before = sys.modules.get("keras")
    try:
        from bert4keras.models import BERT, NEZHA, RoFormer, build_transformer_model
        from bert4keras.tokenizers import Tokenizer, load_vocab
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise ImportError(
            "bert4keras is missing. Install it without its dependencies (its metadata pins "
            "keras<=2.3.1, which cannot coexist with TensorFlow 2): "
            "pip install --no-deps bert4keras==0.11.5"
        ) from error
    finally:
        # bert4keras aliases sys.modules["keras"] to tf.keras; its modules keep their own
        # reference, so the alias is undone to leave `import keras` alone for the user.
        if keras_before is None:
            sys.modules.pop("keras", None)
        else:
            sys.modules["keras"] = keras_before
    architectures = {"bert": BERT, "nezha": NEZHA, "roformer": RoFormer}
    names = (build_transformer_model, architectures, Tokenizer, load_vocab)
    return dict(zip(_BERT4KERAS_NAMES, names, strict=True))


def __getattr__(name):
    if name not in _BERT4KERAS_NAMES:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    names = _import_bert4keras()
    globals().update(names)
    return names[name]


def refuse_rows(bad, label):
    """An assertion (an op of the graph, so TF Serving runs it) that no row is ``bad`` (bool
    ``[batch]``): when one is, it fails with ``label`` and the rows' numbers (counting from 0)."""
    rows = tf.where(bad)[:, 0]
    return tf.debugging.Assert(tf.equal(tf.size(rows), 0), [label, rows], summarize=10)


@contextlib.contextmanager
def tf_writing(output, what, staging, error):
    """An error on writing ``what`` into ``staging`` (a full disk, a read-only file system),
    TensorFlow's or the system's, as one ``error`` line naming ``output``, with the reason alone,
    not the op's name or the staging directory's: a full disk came as a ResourceExhaustedError,
    which the command line took for memory running out."""
    try:
        yield
    except OSError as failure:
        raise error("%s: cannot write %s: %s" % (output, what, failure.strerror or failure)) from None
    except tf.errors.OpError as failure:  # "... STAGING/FILE; No space left on device [Op:SaveV2]"
        reason = failure.message.splitlines()[0].split("; ")[-1].replace(staging, "")
        raise error("%s: cannot write %s: %s" % (output, what, reason)) from None


def graph_function(function, input_signature):
    """``function`` as a ``tf.function`` without AutoGraph: nothing this package traces (the
    Keras layers included) branches on a tensor, so converting the code would only add tracing
    time."""
    return tf.function(function, input_signature=input_signature, autograph=False)
