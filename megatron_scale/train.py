"""`python -m megatron_scale.train ARGS` (or `megatron-scale-train ARGS`), under torchrun or srun.

    torchrun --nproc-per-node 8 -m megatron_scale.train --method scale-preserve \
        --load base_ckpt --tensor-model-parallel-size 2 ... --data-path 1.0 ko_text_document
See `--help` for every flag; megatron_scale/training/ holds the library behind it."""

from megatron_scale.training.loop import main

if __name__ == "__main__":
    main()
