"""Build entry point. All metadata lives in pyproject.toml; the C++ extension (csrc/) is added
here when it lands, as an optional pybind11 Extension with a pure-PyTorch twin."""

from setuptools import setup

setup()
