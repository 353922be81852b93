"""An `EncoderConfig` with its whitening or flow read from a file (`load_config`): what
`SentenceEncoder.load` and the command line build. Here, not in ``config.py``, because a flow is
a Keras model and its file is read by `bert_whitening.flow.Flow.load` (TensorFlow); this module
imports it only when a flow file is given, so that the commands' refusals still answer before
TensorFlow."""

import os

from bert_whitening.arguments import optional_path
from bert_whitening.checkpoints import find_model
from bert_whitening.config import EncoderConfig
from bert_whitening.names import DEFAULT_POOLING
from bert_whitening.whitening import Whitening


def load_config(*, whitening=None, flow=None, pooling=None, **fields):
    """The `EncoderConfig` of ``fields`` with a whitening or flow given as a file (read here, its
    path recorded) or as the object itself, and ``pooling`` None for the one the whitening or
    flow was fitted with, else ``first-last-avg`` (not yet checked against the model,
    `EncoderConfig.check`). A file of another model is refused unread: the model's hidden size
    is known first."""
    whitening_path = flow_path = files = hidden_size = None
    if any(isinstance(fitted, (str, os.PathLike)) for fitted in (whitening, flow)):
        files = find_model(optional_path(fields.get("model"), "model"))
        hidden_size = files.config["hidden_size"]
    if isinstance(whitening, (str, os.PathLike)):
        whitening_path, whitening = os.fspath(whitening), Whitening.load(whitening, hidden_size)
    if isinstance(flow, (str, os.PathLike)):
        from bert_whitening.flow import Flow

        flow_path, flow = os.fspath(flow), Flow.load(flow, hidden_size)
    fitted = whitening if whitening is not None else flow
    pooling = pooling or getattr(fitted, "pooling", None) or DEFAULT_POOLING  # a non-Whitening: refused
    return EncoderConfig(
        pooling=pooling,
        whitening=whitening,
        whitening_path=whitening_path,
        flow=flow,
        flow_path=flow_path,
        model_files=files,  # found once: its configuration and vocabulary are not read again
        **fields,
    )
