"""The model's weights as checkpoints see them:

    keys.py      the checkpoint key tables (base and expansion tensors)
    state.py     global state dicts of a sharded model: gather, load, map
    layout.py    megatron-core's fused qkv and gate/up layouts, as pure tensor functions
(The frozen base's digest, verified at every load, is the checkpoint wing's: checkpoint/digest.py.)
"""
