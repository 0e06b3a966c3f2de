"""Everything a checkpoint is on disk (megatron-core's dist_checkpointing, torch_dist), in one wing
above the model and below the methods (it never imports megatron_scale/methods/):

    records.py   the records a checkpoint keeps beside its tensors (its common state), read typed
    io.py        save_checkpoint / load_checkpoint (the frozen base's digest verified), the run
                 directory's marker (latest_iteration_dir)
    reader.py    MegatronReader: global tensors by key, without ranks
    digest.py    the frozen base's digest, the same at any parallel layout
    layout.py    the layout a training checkpoint was saved at, and resuming at another

Only this package reads or writes a checkpoint's common state (tests/test_layering.py holds it).
"""

from megatron_scale.checkpoint.io import latest_iteration_dir, load_checkpoint, save_checkpoint
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, read_records

__all__ = ["CheckpointError", "CheckpointRecords", "MegatronReader", "latest_iteration_dir", "load_checkpoint",
           "read_records", "save_checkpoint"]
