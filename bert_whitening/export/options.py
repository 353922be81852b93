"""`ExportOptions`: how ``export`` and `bert_whitening.SentenceEncoder.export` write a SavedModel,
checked once when built, before TensorFlow is imported (this module imports none)."""

import dataclasses
from typing import Optional

from bert_whitening.arguments import boolean, positive_int, serving_version
from bert_whitening.errors import ExportError
from bert_whitening.names import EXPORT_PRECISIONS, check_choice


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """What an export is written as, each value refused here, in one line naming it:

    - ``version``: TF Serving's ``N``; None: one more than the highest in the base (or the next
      free one, when another export takes it meanwhile);
    - ``text``: add the ``serve_text`` signature (tokenising in the graph);
    - ``overwrite``: replace an existing ``BASE/N``;
    - ``top_k``: ``serve_search``'s rows per query, at most the corpus size (recorded as
      ``corpus.top_k``);
    - ``precision`` (`EXPORT_PRECISIONS`): ``bfloat16`` traces a `FusedBert`'s matrix products in
      bfloat16 (the rest stays float32), for servers on CPUs with bfloat16 instructions: TF
      Serving's own ``--mixed_precision=bfloat16`` rewrite of a float32 export also rounds the
      residual sums and layer norms. The export is refused if a verification vector falls below
      cosine `bert_whitening.precision.AUTO_MIN_COSINE` of float32, or the model is not a FusedBert.
    """

    version: Optional[int] = None
    text: bool = False
    overwrite: bool = False
    top_k: int = 10
    precision: str = "float32"

    def __post_init__(self):
        if self.version is not None:
            object.__setattr__(self, "version", serving_version(self.version, ExportError))
        object.__setattr__(self, "text", boolean(self.text, "text"))
        object.__setattr__(self, "overwrite", boolean(self.overwrite, "overwrite"))
        object.__setattr__(self, "top_k", positive_int(self.top_k, "top_k"))
        check_choice("precision", self.precision, EXPORT_PRECISIONS)
