"""The one exception type users see: a message meant to be read, not a traceback."""


class NMTError(Exception):
    """A problem with the user's input (config, data, checkpoint) that has a one-line explanation.

    The command-line entry points print the message and exit non-zero; library users can catch it.
    """
