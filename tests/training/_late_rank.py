"""The training entry with one rank held back before it starts (tests only):

    torchrun ... tests/training/_late_rank.py <rank> <seconds> <the entry's arguments>

so that another rank fails first and the launcher ends the held one while it sleeps."""

import os
import sys
import time

late, seconds = int(sys.argv[1]), float(sys.argv[2])
if int(os.environ["RANK"]) == late:
    time.sleep(seconds)

from megatron_scale.training.loop import main  # noqa: E402  (after the hold, as the entry would start)

main(sys.argv[3:])
