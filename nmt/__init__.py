"""nmt: sequence-to-sequence neural machine translation with a choice of attention."""

import time

__version__ = "0.1.0"

# when this process began loading nmt, before torch: `nmt-train train.max_minutes=N` counts the
# command's whole wall clock from here, imports included
IMPORTED = time.monotonic()
