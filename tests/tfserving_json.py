"""TF Serving's decoding of predict request JSON into named tensors, written independently of
bert_whitening.serving from the REST API's rules, so the client is checked against them:

- row format: ``instances`` is a list with one entry per example; an entry is an object of
  named inputs, or a bare value when the signature has one input; entries are stacked along a
  new first dimension, and every named input must be present in each;
- columnar format: ``inputs`` is an object of named, already batched values, or a bare value
  when the signature has one input;
- a body has exactly one of ``instances`` and ``inputs``.
"""

import json

import numpy as np


def decode(body, input_dtypes):
    """``{input name: array}`` from a request body, given the signature's inputs and dtypes."""
    body = json.loads(json.dumps(body))  # what goes over the wire
    assert ("instances" in body) != ("inputs" in body), "exactly one of instances, inputs"
    names = sorted(input_dtypes)
    if "instances" in body:
        instances = body["instances"]
        if all(isinstance(entry, dict) for entry in instances):
            assert all(sorted(entry) == names for entry in instances), "every input in each entry"
            columns = {name: [entry[name] for entry in instances] for name in names}
        else:
            assert len(names) == 1, "bare instances need a single-input signature"
            columns = {names[0]: instances}
    else:
        inputs = body["inputs"]
        columns = inputs if isinstance(inputs, dict) else {names[0]: inputs}
        assert sorted(columns) == names
    return {name: np.array(columns[name], dtype=input_dtypes[name]) for name in names}
