"""nmt: sequence-to-sequence neural machine translation with a choice of attention."""

import os
import time

__version__ = "0.1.0"

# when this process began loading nmt, before torch: `nmt-train train.max_minutes=N` counts the
# command's whole wall clock from here, imports included
IMPORTED = time.monotonic()

# pyarrow's default allocator, jemalloc, starts a background thread when pyarrow is imported, and
# that thread aborted about one torchrun process in ten at exit ("terminate called without an
# active exception"); the system allocator runs none. pyarrow reads this when it is imported,
# which nmt does only after this line (a value set by the user wins).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
