"""The model, by role:

    args.py      the architecture record (LlamaArgs): the only TransformerConfig
    build.py     the one builder (build_model) and the SCALE GPTModel it builds on
    layers/      megatron-core modules and layer specs
    weights/     checkpoint keys, global state dicts, the frozen base's digest, fused layouts
    inputs.py    a batch's position ids and causal mask
    flops.py     the FLOP model of a SCALE model

Route statistics live beside the route sweeps, in megatron_scale/route_stats/.
"""
