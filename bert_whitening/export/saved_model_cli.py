"""TensorFlow's ``saved_model_cli`` with the tensorflow-text ops registered.

An export with the ``serve_text`` signature holds tensorflow-text ops (``RegexSplitWithOffsets``,
``WordpieceTokenizeWithOffsets``) that the plain ``saved_model_cli`` binary does not know, so
its ``run`` fails with "Op type not registered". Use ``python -m bert_whitening.export.saved_model_cli
run ...`` with the same arguments instead.
"""

import sys

from bert_whitening.backend import tf  # noqa: F401  sets up TensorFlow first

# isort: split
import tensorflow_text  # noqa: F401  registers the ops
from tensorflow.python.tools import saved_model_cli

if __name__ == "__main__":
    sys.argv[0] = "saved_model_cli"
    sys.exit(saved_model_cli.main())
