"""Losses of supervised fine-tuning (`bert_whitening.training`), one per file, registered here
by name: CoSENT on the cosines of sentence pairs (`cosent`), and Sentence-BERT's classification
head (`softmax`).

Every loss is a class of one protocol, so the training loop holds no branch on which it runs:

- ``name``: what ``--loss`` and ``training.json`` call it;
- ``check(options)`` (static): the refusals of `TrainOptions` that only this loss makes;
- ``Loss(options)``, then ``prepare_labels(pairs)``: the step's labels of a `PairFile`, a numpy
  array whose dtype is the step's (refusals of the labels here, before TensorFlow);
- ``settings()``: its ``hyperparameters`` in ``training.json`` (``scale``, ``threshold``), also
  what a resumed run must share;
- ``build(dim)``: the variables it trains beside the encoder (after ``prepare_labels``);
- ``__call__(labels, first, second)``: the batch's scalar loss, from the pooled vectors of the
  pairs' first and second sentences;
- ``record()``: what ``training.json`` records of it besides its settings.

Importing this package imports no TensorFlow: each loss imports it where it computes.
"""

from bert_whitening.losses.cosent import CoSENT, cosent_loss
from bert_whitening.losses.softmax import Softmax, SoftmaxHead, softmax_loss

#: Every loss by its name, in the order ``--loss`` lists them.
LOSSES = {loss.name: loss for loss in (CoSENT, Softmax)}

__all__ = ["LOSSES", "CoSENT", "Softmax", "SoftmaxHead", "cosent_loss", "softmax_loss"]
