"""The peers' side of bench_encode.py; runs in .venv-torch (scripts/torch_venv.py).

    python peer_sentence_transformers.py REQUEST.json BACKEND

REQUEST holds the sentences, the STS-B test sentences, calibration sentences, the model
directory, a working directory, maxlen, batch size and threads. BACKEND is one of
bench_encode.py's ``PEER_BACKENDS``:
sentence-transformers on torch, ONNX Runtime and OpenVINO, in float32 and int8, each exported
from the model directory (copied into the working directory first) with no download.

After loading, exporting and a warm-up it prints one JSON line (its versions, threads and what
it runs, or ``{"error": ...}`` and exits when the backend cannot run here), then answers each
``time`` line on stdin with the seconds of one full encode, so that the benchmark interleaves
its repetitions with ours; ``save PATH`` writes the vectors of the sentences and of the test
sentences to PATH (.npz) and exits.
"""

import json
import os
import shutil
import sys
import time
import traceback

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, __version__

os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"  # everything is local

ONNX_INT8 = "onnx/model_qint8_avx512_vnni.onnx"
OPENVINO_INT8 = "openvino/openvino_model_qint8_quantized.xml"


def sentence_transformer(request, backend):
    """The sentence-transformers model of ``backend`` and a note on how it runs."""
    directory, threads = request["copy"], request["threads"]
    if backend == "torch":
        return SentenceTransformer(directory, device="cpu"), "torch CPU"
    if backend in ("onnx", "onnx-int8"):
        model = SentenceTransformer(directory, backend="onnx", device="cpu")  # exports model.onnx
        if backend == "onnx":
            return model, "ONNX Runtime"
        from sentence_transformers import export_dynamic_quantized_onnx_model

        export_dynamic_quantized_onnx_model(model, "avx512_vnni", directory)
        return SentenceTransformer(
            directory, backend="onnx", device="cpu", model_kwargs={"file_name": ONNX_INT8}
        ), "ONNX Runtime, int8"
    # OpenVINO: float32 or bfloat16 asked for explicitly, or its own default, which on CPUs with
    # native bfloat16 is bfloat16; the int8 model keeps OpenVINO's defaults for what is not int8.
    threads_only = {"INFERENCE_NUM_THREADS": str(threads)}
    if backend in ("openvino-bf16", "openvino-default"):
        hint = {"INFERENCE_PRECISION_HINT": "bf16"} if backend == "openvino-bf16" else {}
        model = SentenceTransformer(
            directory, backend="openvino", device="cpu", model_kwargs={"ov_config": dict(threads_only, **hint)}
        )
        return model, "OpenVINO, inference precision %s" % _inference_precision(model)
    f32 = dict(threads_only, INFERENCE_PRECISION_HINT="f32")
    model = SentenceTransformer(directory, backend="openvino", device="cpu", model_kwargs={"ov_config": f32})
    if backend == "openvino":
        return model, "OpenVINO, inference precision %s" % _inference_precision(model)
    from optimum.intel import OVQuantizationConfig
    from sentence_transformers import export_static_quantized_openvino_model

    calibration = os.path.join(request["workdir"], "calibration")
    os.makedirs(calibration, exist_ok=True)
    with open(os.path.join(calibration, "train.jsonl"), "w", encoding="utf-8") as stream:
        stream.writelines(json.dumps({"sentence": s}) + "\n" for s in request["calibration"])
    export_static_quantized_openvino_model(
        model,
        OVQuantizationConfig(num_samples=len(request["calibration"])),
        directory,
        dataset_name=calibration,
        dataset_config_name="default",
        dataset_split="train",
        column_name="sentence",
    )
    model = SentenceTransformer(
        directory,
        backend="openvino",
        device="cpu",
        model_kwargs={"file_name": OPENVINO_INT8, "ov_config": threads_only},
    )
    return model, "OpenVINO int8, rest in %s (its default)" % _inference_precision(model)


def _inference_precision(model):
    """The precision OpenVINO's compiled model runs in (what a hint, or its default, chose)."""
    return model[0].auto_model.request.get_property("INFERENCE_PRECISION_HINT").get_type_name()


class OnnxRuntimeEncoder:
    """What ``backend="onnx"`` runs, without optimum: the transformer exported by torch.onnx,
    run by an ONNX Runtime session, then sentence-transformers' mean pooling and normalisation
    in numpy, on its tokenizer and its length-sorted batches."""

    def __init__(self, request, quantized):
        import onnxruntime

        self.model = SentenceTransformer(request["copy"], device="cpu")
        path = os.path.join(request["copy"], "model.onnx")  # each backend's own copy: no race
        self._export(path)
        if quantized:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            # optimum's avx512_vnni dynamic configuration: int8 weights per channel, uint8
            # activations, no reduced range.
            quantized_path = path.replace(".onnx", "_qint8.onnx")
            quantize_dynamic(path, quantized_path, per_channel=True, reduce_range=False, weight_type=QuantType.QInt8)
            path = quantized_path
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = request["threads"]
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.about = "onnxruntime %s%s" % (onnxruntime.__version__, ", int8" if quantized else "")

    def _export(self, path):
        transformer = self.model[0].auto_model

        class LastHiddenState(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.transformer = transformer

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.transformer(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        # The example batch must hold padding: transformers drops an all-ones attention mask,
        # and the export would keep that branch, ignoring the mask of every later batch.
        example = torch.ones(2, 8, dtype=torch.long)
        mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
        dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("length", max=512)}
        torch.onnx.export(
            LastHiddenState().eval(),
            (example, mask, torch.zeros_like(example)),
            path,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamo=True,
            external_data=False,
            dynamic_shapes={"input_ids": dims, "attention_mask": dims, "token_type_ids": dims},
        )

    def encode(self, sentences, batch_size):
        order = np.argsort([-len(s) for s in sentences], kind="stable")  # as sentence-transformers sorts
        vectors = np.zeros((len(sentences), self.model.get_sentence_embedding_dimension()), np.float32)
        tokenizer = self.model.tokenizer
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            tokens = tokenizer(
                [sentences[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=self.model.max_seq_length,
                return_tensors="np",
            )
            inputs = {name: tokens[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = self.session.run(None, inputs)[0]
            mask = inputs["attention_mask"][..., None].astype(np.float32)
            mean = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            vectors[rows] = mean / np.linalg.norm(mean, axis=1, keepdims=True)
        return vectors


def load(request, backend):
    """``(encode(sentences) -> vectors, note)`` of ``backend``."""
    batch_size = request["batch_size"]
    if backend.startswith("onnxruntime"):
        encoder = OnnxRuntimeEncoder(request, quantized=backend.endswith("int8"))
        encoder.model.max_seq_length = request["maxlen"]
        return lambda sentences: encoder.encode(sentences, batch_size), encoder.about
    model, note = sentence_transformer(request, backend)
    model.max_seq_length = request["maxlen"]
    return lambda sentences: model.encode(sentences, batch_size=batch_size), note


def main(request_path, backend):
    # Answers go to the original standard output; whatever the libraries print goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    answer = lambda data: print(data if isinstance(data, float) else json.dumps(data), file=answers, flush=True)
    with open(request_path, encoding="utf-8") as stream:
        request = json.load(stream)
    torch.set_num_threads(request["threads"])
    request["copy"] = os.path.join(request["workdir"], "model-" + backend)
    shutil.copytree(request["model"], request["copy"], dirs_exist_ok=True)
    try:
        encode, note = load(request, backend)
        vectors = encode(request["sentences"][: request["batch_size"]])  # warm-up
    except Exception as error:  # the backend cannot run here: say why, in one line
        last = traceback.extract_tb(error.__traceback__)[-1]
        why = "%s: %s (%s:%d)" % (
            type(error).__name__,
            str(error).splitlines()[0],
            os.path.basename(last.filename),
            last.lineno,
        )
        if backend in ("onnx", "onnx-int8"):
            why += " -- optimum-onnx cannot be installed beside sentence-transformers 6.2.0: see scripts/torch_venv.py"
        answer({"error": why})
        return
    answer(
        {
            "versions": "sentence-transformers %s, torch %s" % (__version__, torch.__version__),
            "threads": torch.get_num_threads(),
            "note": note,
        }
    )
    sentences = request["sentences"]
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "time":
            start = time.perf_counter()
            vectors = encode(sentences)
            answer(time.perf_counter() - start)
        elif command == "save":
            np.savez(argument, vectors=vectors, test=encode(request["test"]))
            return


if __name__ == "__main__":
    main(*sys.argv[1:])
