"""Build entry point. Metadata lives in pyproject.toml; this adds the C++ extension megatron_scale._C
(csrc/, pybind11), each op of which has a pure-PyTorch twin the package falls back to.

pybind11 is a build requirement: listed in setup_requires, which setuptools' PEP 517 backend hands
to pip as a dynamic build requirement, so an isolated build (pip install ., pip install -e .) gets
it. The first pass of that backend runs this file before pybind11 exists, hence the guarded
import. The extension is optional: where no C++17 compiler is found the install still succeeds and
the package uses the twins (route_stats/sums.py says so once, at first use)."""

from setuptools import setup

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError:  # PEP 517 get_requires pass, or a non-isolated build without pybind11
    ext_modules = []
else:
    ext_modules = [
        Pybind11Extension(
            "megatron_scale._C",
            sources=["csrc/route_stats.cpp"],
            extra_compile_args=["-O3", "-Wall", "-std=c++17"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]

setup(ext_modules=ext_modules, setup_requires=["pybind11>=2.12"])
