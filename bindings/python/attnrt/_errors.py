"""attnrt.Error and one subclass per status code of the C ABI (attnrt_status)."""
from __future__ import annotations


class Error(Exception):
    """A failing attnrt call. ``status`` is the ABI's status name, ``code`` its number and
    ``message`` the library's text, which names the offending input with the expected and the
    actual value."""

    code: int = -1
    status: str = "ATTNRT_ERROR_UNKNOWN"

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class InvalidArgumentError(Error, ValueError):
    """An argument, attribute, shape, dtype or value is invalid (ATTNRT_ERROR_INVALID_ARGUMENT)."""
    code, status = 1, "ATTNRT_ERROR_INVALID_ARGUMENT"


class UnsupportedError(Error):
    """Valid, but no kernel accepts it; the message lists each kernel's reason
    (ATTNRT_ERROR_UNSUPPORTED)."""
    code, status = 2, "ATTNRT_ERROR_UNSUPPORTED"


class NotFoundError(Error, LookupError):
    """An index or name does not exist (ATTNRT_ERROR_NOT_FOUND)."""
    code, status = 3, "ATTNRT_ERROR_NOT_FOUND"


class UnavailableError(Error):
    """A device or plugin is not available on this machine (ATTNRT_ERROR_UNAVAILABLE)."""
    code, status = 4, "ATTNRT_ERROR_UNAVAILABLE"


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed (ATTNRT_ERROR_OUT_OF_MEMORY)."""
    code, status = 5, "ATTNRT_ERROR_OUT_OF_MEMORY"


class PlanMismatchError(Error):
    """The tensors given to run differ from those the plan was made for
    (ATTNRT_ERROR_PLAN_MISMATCH)."""
    code, status = 6, "ATTNRT_ERROR_PLAN_MISMATCH"


class AbiMismatchError(Error):
    """A struct_size or ABI version the library cannot accept (ATTNRT_ERROR_ABI_MISMATCH)."""
    code, status = 7, "ATTNRT_ERROR_ABI_MISMATCH"


class InternalError(Error):
    """A bug or unexpected failure inside attnrt or a plugin (ATTNRT_ERROR_INTERNAL)."""
    code, status = 8, "ATTNRT_ERROR_INTERNAL"


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, UnsupportedError, NotFoundError, UnavailableError, OutOfMemoryError,
    PlanMismatchError, AbiMismatchError, InternalError)}


def error_class(code: int) -> type[Error]:
    """The Error subclass of a status code (called by the native module when a call fails)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    return type("Error", (Error,), {"code": code, "status": f"ATTNRT_STATUS_{code}"})
