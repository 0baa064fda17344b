"""The exception type the workbench raises for bad input (and its one kind a caller may pass over)."""


class WorkbenchError(ValueError):
    """Bad input or an unsupported setting, with a message that says what to do.

    Raised before any work starts wherever the input can be checked up front, so that a
    caller never sees a traceback from inside torch and nothing is left half-written.
    """


class TableRefusedError(WorkbenchError):
    """The records cannot give a RESULTS table (a study short of its n, or a check its pre-registration
    makes before any reading failed): `kvwb results --out` leaves it out with a warning rather than stop."""


class RecordShortError(TableRefusedError):
    """A kept record holds fewer examples than its study is read at (a study still running): its
    tables are refused (a TableRefusedError)."""


class RecordMissingError(TableRefusedError):
    """The records hold no folder of a study registered before its record is kept (a study not started
    or not kept yet): its tables are refused (a TableRefusedError), as a record short of its n is. Any
    other missing record is a plain WorkbenchError."""


class WorkbenchWarning(UserWarning):
    """Something the user should know that did not stop the work (a damaged file moved aside and
    recomputed, an example skipped); `kvwb` prints each as one `kvwb: warning:` line."""
