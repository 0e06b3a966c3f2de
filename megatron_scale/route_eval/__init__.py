"""SCALE-Route's routers analysed from stored per-token records, with no model: sweeps, ROC,
calibration, controls, units (route_eval/*). The model passes that make the records stand beside
evaluation (evaluation/route_records.py, evaluation/route_sweep.py); a layering test keeps this
room off the methods, the launcher and training."""
