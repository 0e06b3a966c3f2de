"""What the kit carries: the pins, in one place (a test holds megatron-core's to pyproject.toml's).

A GPU node (the lent H100/H200 image: Python 3.12, torch 2.11.0+cu130, transformers 5.17, onnx,
onnxscript, einops, numpy, pytest, pytest-xdist) lacks megatron-core, Transformer Engine and
pydantic, which TE imports on every import. The kit carries exactly those:
  - main/ (one call): TE's Python package; its cu13 core library with the device code cut to
    the node's architecture (fatbin.py); TE's PyTorch extension prebuilt here against the node's
    torch in a venv shaped like it; megatron-core; the pydantic stack. Installed --no-deps.
  - src/ (fallback, small): the extension's source and the CUDA headers its build needs where
    the node has no CUDA toolkit, to build it on the node (source.py) when the prebuilt one does
    not import there.
  - full/kit-NN (fallback, one call each): the unmodified core wheel in parts (pack.py), when the
    cut library does not run.
"""

from __future__ import annotations

MCORE = "megatron-core==0.19.2"
TE_VERSION = "2.20.2"
TE_PYTHON = f"transformer-engine=={TE_VERSION}"
TE_CORE = f"transformer-engine-cu13=={TE_VERSION}"
TE_SDIST = "transformer-engine-torch"
# pydantic and what it needs (versions tested with TE 2.20.2); typing-extensions only where the
# node's is older than this (pydantic-core 2.50 needs >= 4.16)
PYDANTIC = ("pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5")
TYPING_EXTENSIONS = "typing-extensions==4.16.0"
# CUDA headers the extension's build includes that a pip-installed CUDA torch does not bring
# (found missing building it here): header -> the wheel carrying it, CUDA 13.0 like the node's.
BUILD_HEADERS = {"crt/host_config.h": "nvidia-cuda-crt==13.0.*", "nv/target": "nvidia-cuda-cccl==13.0.*"}
PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PYTHON_INCLUDE = "python3.12-include.tar.gz"  # Python.h, for a node without python3.12-dev
CORE_LIBRARY = "transformer_engine/wheel_lib/libtransformer_engine.so"  # the member the cut rewrites
# the folders under the kit's --out, each carried by one call
MAIN, SOURCE, FULL = "main", "src", "full"
