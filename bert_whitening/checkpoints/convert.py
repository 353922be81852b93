"""``convert-hf``: a Hugging Face BERT directory written as a Google-format checkpoint directory
that bert4keras and the original scripts load.

Its own module, apart from the readers it composes: it reads the model as ``encode --model``
does, down to the transformer built from it (`bert_whitening.models.load_transformer`), which the
checkpoint readers themselves must not import (the model builder reads them).
"""

import os

from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.io.atomic import check_output_directory, publish_directory, staged_directory


def convert_hf(hf_directory, output_directory, overwrite=False):
    """Write the Hugging Face BERT in ``hf_directory`` as a new Google-format checkpoint
    directory, all at once: staged beside it and renamed into place, so a failure leaves none.

    The model is read as ``encode --model`` reads it: `find_model` (configuration, vocabulary,
    safetensors header), its sizes and memory (`bert_whitening.models.check_loadable`) before
    anything is written, every tensor's shape as it is written (`ModelFiles.variables`), and the
    transformer loaded from the same file (`bert_whitening.models.load_transformer`) before the
    directory is put in place: whatever the loaders refuse is refused here and nothing is left,
    and what is written holds the configuration, the vocabulary bytes and the arrays that were
    checked. The tensors are written before the model is built, not beside it: TensorFlow's
    ``SaveV2`` holds every tensor at once, and the built model stays in Keras' graph."""
    check_output_directory(output_directory, [hf_directory], overwrite)
    files = find_model(hf_directory)
    if files.format != "huggingface":
        raise CheckpointError(
            "%s is a Google-format directory already (%s): convert-hf reads Hugging Face BERT directories"
            % (files.directory, os.path.basename(files.config_path))
        )
    from bert_whitening.models import check_loadable, load_transformer  # TensorFlow, once the files are known good

    pooler = any(name.startswith("bert/pooler/") for name in files.variable_shapes)
    check_loadable(files, "bert")  # what loading holds is more than every tensor written at once, read a time
    with staged_directory(output_directory) as staging:
        write_checkpoint(staging, files.config, files.variables, files.vocab_bytes, output_directory)
        load_transformer(files, "bert", pooler, "a bert model" + (" with its pooler" if pooler else ""))
        publish_directory(staging, output_directory, overwrite=overwrite)
    return output_directory
