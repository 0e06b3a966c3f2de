"""What the kit carries: the pins, in one place (a test holds the floors to pyproject.toml's).

A GPU node is assumed to have Python 3.12 and a CUDA 13 build of PyTorch (its own, never
replaced), and nothing else of ours: no megatron-core, no Transformer Engine, perhaps an
older transformers. The kit carries
  - megatron-core and Transformer Engine's three pieces, installed without dependencies: TE's
    Python package, its prebuilt core library for CUDA 13, and the source of its PyTorch
    extension, which has to be built against the node's own torch (PyPI has no wheel of it);
  - two header-only CUDA wheels the extension's build needs where the node has no CUDA toolkit;
  - the pure-Python packages TE and megatron-core import at runtime (pydantic, onnx and
    onnxscript: on every TE import; einops: TE's attention), the ones the GPU tests and tools
    import, setuptools for the extension's build, and transformers at the project's floor: each
    with its dependencies, installed only where the node lacks them.
"""

from __future__ import annotations

MCORE = "megatron-core==0.19.2"
TE_VERSION = "2.20.2"
TE_WHEELS = (f"transformer-engine=={TE_VERSION}", f"transformer-engine-cu13=={TE_VERSION}")
TE_SDIST = "transformer-engine-torch"
TRANSFORMERS_FLOOR = "transformers>=5.23"
TRANSFORMERS_PIN = "transformers==5.23.0"  # the floor's own release: the kit's choice when the node's is older
# Installed where missing (pip keeps what the node already satisfies); downloaded with their
# dependencies. pydantic: the versions the research note tested with TE 2.20.2. onnx, onnxscript:
# TE 2.20.2 imports them on every import (pytorch/export.py; found installing the kit here).
RUNTIME = ("pydantic==2.14.4", "einops", "onnx", "onnxscript", "packaging>=24.2", "psutil", "tqdm", "numpy",
           "safetensors>=0.8", "pytest>=8", "pytest-xdist>=3.5", "setuptools>=61")
# CUDA headers the extension's build includes that a pip-installed CUDA torch does not bring
# (found missing by building it here against torch 2.13+cu130's wheels): header -> the wheel
# carrying it, CUDA 13.0 like the node's runtime. Used only where the node has no such header
# (a CUDA toolkit has them), unpacked into the work folder, never installed.
BUILD_HEADERS = {"crt/host_config.h": "nvidia-cuda-crt==13.0.*", "nv/target": "nvidia-cuda-cccl==13.0.*"}
PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PYTHON_INCLUDE = "python3.12-include.tar.gz"  # Python.h, for a node without python3.12-dev


def install_requirements() -> list[str]:
    """What the node's pip resolves from the kit alone: the runtime list and transformers at the
    floor (an installed transformers at or above it is kept)."""
    return [*RUNTIME, TRANSFORMERS_FLOOR]
