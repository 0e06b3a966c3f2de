"""Route statistics: what a SCALE-Route router compares with tau, and what one forward pass tells
about every threshold; pure functions of the two heads' vocab-parallel logits, shared by the
router (model/layers/routing.py) and the route sweeps (route_eval/, bio/):

    sums.py            per-token partial sums over a vocab slice (C++ op, PyTorch twin)
    statistics.py      the router statistics (cosine, centered-cosine, max-prob, certainty)
    token_records.py   per-token losses, correctness and statistics for a whole threshold sweep
    mixing.py          the router's controls: z_p and z_a mixed by a global weight or at random
"""
