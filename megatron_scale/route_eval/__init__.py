"""SCALE-Route at every threshold from one pass: sweeps, ROC, calibration (route_eval/*)."""
