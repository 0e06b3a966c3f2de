"""The training entry's library: arguments, model per method, data, run checkpoints, loop."""
