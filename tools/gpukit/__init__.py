"""The offline GPU kit (docs/gpu.md): Transformer Engine for one GPU node in one carried folder.
build.py lays it out on a networked machine (fetch.py downloads, fatbin.py cuts the core
library's device code to the node's architecture, wheel.py repacks it), node.py checks it against
the node and installs it, source.py builds TE's PyTorch extension from source (the prebuilt one,
and the fallback), pack.py splits the unmodified core wheel into carried parts. `python3 tools/gpukit`
(cli.py) is the command line; standard library only."""
