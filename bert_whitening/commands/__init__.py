"""The ``bert-whitening`` commands, one module each, each declaring its one `Command` as
``COMMAND`` (`bert_whitening.commands.base`); `COMMANDS` lists them in the order of the
program's help, and `bert_whitening.cli` builds everything from it. Shared pieces: the argument
types and option groups (`options`), the steps every run shares (`base`), ``eval`` and
``eval-retrieval``'s (`tasks`).

Importing a command module imports only what its parser needs: its run imports TensorFlow and
the rest (scipy, FAISS, Beam) inside itself, once its checks have passed."""

from bert_whitening.commands import (
    beam_encode,
    beam_fit,
    convert_hf,
    encode,
    eval,
    eval_retrieval,
    export,
    fit,
    index,
    search,
    train,
)

COMMANDS = tuple(
    module.COMMAND
    for module in (fit, encode, beam_fit, beam_encode, export, eval, eval_retrieval, index, search, convert_hf, train)
)
