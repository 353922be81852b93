"""Export an encoder as one SavedModel for TF Serving (`saved_model`), verified in a fresh process
(`verify`), its files bound to its record (`record`: `check_export`).

The names below are imported on first use, so the verification child
(``python -m bert_whitening.export.verify``) loads TensorFlow alone, as a server does.
"""

import importlib

_WHERE = {
    "check_export": "record",
    "ServingModule": "saved_model",
    "export_saved_model": "saved_model",
    "ExportOptions": "options",
    "target_version": "layout",
    "run_in_fresh_process": "verify",
}

__all__ = ["ExportError", *_WHERE]

from bert_whitening.errors import ExportError  # noqa: E402


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module("bert_whitening.export." + _WHERE[name]), name)
