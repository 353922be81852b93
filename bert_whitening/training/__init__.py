"""Supervised fine-tuning of a plain BERT on senteval_cn pair files, written back as a model
directory that every command reads (issue #43): `train` with `TrainOptions`
(`bert_whitening.training.options`), the loop (`loop`), the resumable state of a run with
``resume`` (`state`), Adam as torch and bert4keras place its epsilon (`adam`). The losses are
`bert_whitening.losses`'. Importing this package imports no TensorFlow.
"""

from bert_whitening.training.loop import VALID_BATCH, TrainingResult, train
from bert_whitening.training.options import (
    PairFile,
    Plan,
    TrainOptions,
    check_step_memory,
    parameter_count,
    read_pair_file,
)
from bert_whitening.training.state import (
    RESUME_SUFFIX,
    STATE_FILE,
    STATE_FORMAT,
    Checkpoints,
    DamagedState,
    order_generator,
    resumable_identity,
)

__all__ = [
    "RESUME_SUFFIX",
    "STATE_FILE",
    "STATE_FORMAT",
    "VALID_BATCH",
    "Checkpoints",
    "DamagedState",
    "PairFile",
    "Plan",
    "TrainOptions",
    "TrainingResult",
    "check_step_memory",
    "order_generator",
    "parameter_count",
    "read_pair_file",
    "resumable_identity",
    "train",
]
