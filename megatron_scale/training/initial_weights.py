"""Where a run's first weights come from: the method's own `load_initial` (megatron_scale/methods/).

A base checkpoint (any megatron-core GPT dist checkpoint, including a `full` run's) is read as
global tensors and, for SCALE, upscaled on load, for LLaMA-Pro grown in depth; a SCALE checkpoint
loads as it is. A LoRA model takes a base checkpoint (its adapters start fresh) or a LoRA one
(adapters included).
"""

from __future__ import annotations

from typing import Any

from megatron_scale.methods import TrainingMethod
from megatron_scale.checkpoint.records import CheckpointRecords, read_records


def load_initial_weights(model: Any, directory: str, method: TrainingMethod, base_layers: int,
                         records: CheckpointRecords | None = None) -> str:
    """Fill `model` (built for `method` from a base of `base_layers` layers) from --load when it
    is not a training run to resume. `records`: --load's, as the plan read them (read here when
    not given). Returns what was loaded."""
    if records is None:
        records = read_records(directory, required=False)
    return method.load_initial(model, directory, records, base_layers)
