"""Test machinery shipped with the package, so that the tests, tools/kill_trials.py and CPU runs
can use it without the repository's tests/ directory:

    device_audit.py   on the CPU backend, fails a host tensor that meets the run's device (patches
                      torch process-wide while on; MEGATRON_SCALE_DEVICE_AUDIT=0 turns it off)
    faults.py         named fault points that SIGKILL a launch (MEGATRON_SCALE_FAULT*)
    kills.py          the kill harness: kill a launch at a seeded point, resume, compare bitwise
    runs.py           tiny datasets and torchrun command lines of the real training entry

Production code never imports this package except through megatron_scale/hooks.py, the one hook,
which does so only when the environment switches the machinery on (tests/test_layering.py).
"""
