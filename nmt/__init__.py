"""nmt: sequence-to-sequence neural machine translation with a choice of attention."""

__version__ = "0.1.0"
