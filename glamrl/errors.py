"""The one base class of glamrl's named errors.

Every error that means "the input is wrong" (a config value, an env id, a model path, a
checkpoint, a run directory) derives from `GlamrlError`; the CLI prints exactly those
as one line and exits 2. Anything else is a bug and keeps its traceback.
"""


class GlamrlError(Exception):
    """Bad input or an unusable run: the message says what is wrong and how to fix it."""
