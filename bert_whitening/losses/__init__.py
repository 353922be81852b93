"""Losses of supervised fine-tuning (`bert_whitening.training`), one per file: CoSENT on the
cosines of sentence pairs (`cosent`), and Sentence-BERT's classification head (`softmax`)."""

from bert_whitening.losses.cosent import cosent_loss
from bert_whitening.losses.softmax import SoftmaxHead, softmax_loss

__all__ = ["SoftmaxHead", "cosent_loss", "softmax_loss"]
