"""The one exception type the workbench raises for bad input."""


class WorkbenchError(ValueError):
    """Bad input or an unsupported setting, with a message that says what to do.

    Raised before any work starts wherever the input can be checked up front, so that a
    caller never sees a traceback from inside torch and nothing is left half-written.
    """
