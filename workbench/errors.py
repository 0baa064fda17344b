"""The one exception type the workbench raises for bad input."""


class WorkbenchError(ValueError):
    """Bad input or an unsupported setting, with a message that says what to do.

    Raised before any work starts wherever the input can be checked up front, so that a
    caller never sees a traceback from inside torch and nothing is left half-written.
    """


class WorkbenchWarning(UserWarning):
    """Something the user should know that did not stop the work (a damaged file moved aside and
    recomputed, an example skipped); `kvwb` prints each as one `kvwb: warning:` line."""
