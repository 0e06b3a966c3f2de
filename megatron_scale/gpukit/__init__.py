"""The offline GPU kit: what a networked machine gathers (fetch.py), how it is laid out in folders
of a bounded size and checked (pack.py), and what the GPU node checks and runs to install it
(node.py). tools/gpu_kit.py is the command line; docs/gpu.md the walk-through."""
