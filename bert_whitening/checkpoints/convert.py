"""``convert-hf``: a Hugging Face BERT directory written as a Google-format checkpoint directory
that bert4keras and the original scripts load.

Its own module, apart from the readers it composes: it reads the model as ``encode --model``
does, down to the transformer built from it (`bert_whitening.models.load_transformer`), which the
checkpoint readers themselves must not import (the model builder reads them).
"""

import os

from bert_whitening.atomic import check_output_directory, publish_directory, staged_directory
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.checkpoints.google import write_checkpoint


def convert_hf(hf_directory, output_directory, overwrite=False):
    """Write the Hugging Face BERT in ``hf_directory`` as a new Google-format checkpoint
    directory, all at once: staged beside it and renamed into place, so a failure leaves none.

    The model is read as ``encode --model`` reads it: `find_model` (configuration, vocabulary,
    safetensors header) and the transformer loaded from it (`bert_whitening.models.load_transformer`:
    sizes and every tensor's shape against the configuration), so whatever the loaders refuse is
    refused here before anything is written, and what is written holds the configuration, the
    vocabulary bytes and the arrays that were checked."""
    check_output_directory(output_directory, [hf_directory], overwrite)
    files = find_model(hf_directory)
    if files.format != "huggingface":
        raise CheckpointError(
            "%s is a Google-format directory already (%s): convert-hf reads Hugging Face BERT directories"
            % (files.directory, os.path.basename(files.config_path))
        )
    from bert_whitening.models import load_transformer  # TensorFlow, once the files read are known good

    pooler = any(name.startswith("bert/pooler/") for name in files.variable_shapes)
    files.check_load_memory(one_at_a_time=False)  # the built model, then every tensor written at once
    load_transformer(files, "bert", pooler, "a bert model" + (" with its pooler" if pooler else ""))
    with staged_directory(output_directory) as staging:
        write_checkpoint(staging, files.config, files.variables, files.vocab_bytes, output_directory)
        publish_directory(staging, output_directory, overwrite=overwrite)
    return output_directory
