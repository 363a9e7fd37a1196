"""The one exception npbert raises for bad input, so the CLI can tell it from a bug."""


class InputError(ValueError):
    """Bad input: a wrong id, shape, file or model. The message names what and where."""
