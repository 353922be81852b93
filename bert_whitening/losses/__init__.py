"""Losses of supervised fine-tuning (`bert_whitening.training`), one per file: CoSENT on the
cosines of sentence pairs (`cosent`), and Sentence-BERT's classification head (`softmax`)."""

from bert_whitening.losses.cosent import cosent_loss
from bert_whitening.losses.softmax import SoftmaxHead, pair_features, softmax_loss
from bert_whitening.names import LOSSES

__all__ = ["LOSSES", "SoftmaxHead", "cosent_loss", "pair_features", "softmax_loss"]
