"""The separate environment with PyTorch that the comparisons with peers run in.

torch, transformers, sentence-transformers and their ONNX Runtime and OpenVINO backends are
never dependencies of bert-whitening: the scripts that compare against them create
``.venv-torch`` on first use and run the peer's side there, in a child process. torch is
installed first, pinned to the CPU build these machines carry, and pinned again with everything
else, so that nothing later replaces it with a CUDA build.

Versions, resolved together with torch 2.13.0 and sentence-transformers 6.2.0:
- OpenVINO: ``optimum-intel[openvino]`` 2.2.0 with openvino 2026.4.1 (its nncf does the static
  int8 quantisation); ``datasets`` 5.0.1 is what sentence-transformers' calibration reads
  (from a local file, no download). optimum-intel declares torchvision, whose registry wheels
  are CUDA builds that cannot load next to the CPU torch (``operator torchvision::nms does not
  exist``, which breaks ``import transformers``); text models never use it, so it is removed.
- ONNX Runtime: 1.31.1, with onnx 1.23.2 and onnxscript 0.7.2 (torch.onnx's exporter).
  sentence-transformers' own ``backend="onnx"`` needs optimum-onnx, whose newest release
  (0.1.0) requires transformers < 4.58 while sentence-transformers 6.2.0 requires
  transformers >= 5: the two cannot be installed together, so it is left out and the peer
  benchmark says so in its table (see benchmarks/peer_sentence_transformers.py).
- FAISS: faiss-cpu 1.15.1, the package's own pin, for sentence-transformers'
  ``semantic_search_faiss`` (benchmarks/bench_compressed.py --retrieval).

The marker file records the packages installed: an environment made before one was added is
completed on its next use (pip leaves the packages it already has as they are).
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv-torch")
TORCH = "torch==2.13.0"
PACKAGES = [
    [TORCH],
    [
        TORCH,
        "sentence-transformers==6.2.0",
        "transformers==5.5.4",
        "safetensors",
        "numpy",
        "optimum-intel[openvino]==2.2.0",
        "openvino==2026.4.1",
        "nncf==3.4.0",
        "datasets==5.0.1",
        "onnxruntime==1.31.1",
        "onnx==1.23.2",
        "onnxscript==0.7.2",
        "faiss-cpu==1.15.1",
    ],
]
REMOVE = ["torchvision"]


def python():
    """The environment's interpreter, after creating the environment if it is not complete."""
    executable = os.path.join(VENV, "bin", "python")
    marker = os.path.join(VENV, ".installed")
    wanted = "\n".join(" ".join(group) for group in PACKAGES) + "\n"
    if not os.path.exists(marker) or _read(marker) != wanted:
        if not os.path.exists(executable):  # completed, not made again
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        pip = [executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
        for group in PACKAGES:
            subprocess.run(pip + ["install"] + group, check=True)
        subprocess.run(pip + ["uninstall", "--yes"] + REMOVE, check=True)
        version = subprocess.run(
            [executable, "-c", "import torch; print(torch.__version__)"], check=True, capture_output=True, text=True
        ).stdout.strip()
        if not version.endswith("+cpu"):
            raise RuntimeError("%s has torch %s, not the CPU build" % (VENV, version))
        with open(marker, "w") as stream:
            stream.write(wanted)
    return executable


def _read(path):
    with open(path) as stream:
        return stream.read()
