"""The one error type stages raise for input they cannot use."""


class InputDataError(Exception):
    """Input the pipeline cannot use. The message names the file, line or config key
    and what to do about it; the runner shows it as is, without a traceback."""
