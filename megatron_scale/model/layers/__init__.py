"""The model's layers: megatron-core modules and layer specs (no builder, no checkpoint I/O).

    spec.py                 the layer specs (SCALE's, and the Llama ones the other methods use)
    linear.py, fused.py     the SCALE linears and their fused GEMMs; te_linear.py, te.py: on TE
    te_fused.py, planar.py  one node per SCALE linear over the planar residual stream, its calls
                            TE's (te.py te_functional) or torch's (torch_ops.py); split_attention.py:
                            the base heads attended without autograd under the skip
    partition.py            how a SCALE linear's blocks are split across TP ranks
    norm.py                 RMSNorm over the widened hidden state
    heads.py                the two-table embedding and two-headed output layer, and the
                            functions that choose a built model's head and router settings
    routing.py, route_units.py   the SCALE-Route router and its token/char/word units
    output_rows.py          script-scoped output rows: which rows of W_out_up train
    gate.py                 the gate of W_out_up's term, from a statistic of z_p alone
    lora.py                 LoRA linears (the LoRA baseline)
"""
