"""Errors of the recording database.

Every class here is a condition a user can fix or must be told about (a wrong path, a
database of a newer format, corrupt data): ``mneme_user_error = True`` makes the CLI
print it as one line and exit non-zero instead of showing a traceback.
"""

from __future__ import annotations

from mneme.instrument.errors import MnemeError


class DatabaseError(MnemeError):
    """Base of every recording-database error; the message is one line for the user."""

    mneme_user_error = True


class NotADatabaseError(DatabaseError):
    """The path does not exist or is not a mneme recording database."""


class FormatVersionError(DatabaseError):
    """The database was written in a format version this reader does not know."""


class CorruptDataError(DatabaseError):
    """Metadata or chunk data is malformed, truncated or fails its checksum."""


class InvalidNameError(DatabaseError):
    """A kernel, instance or region name is not allowed (e.g. path traversal)."""


class NotFoundError(DatabaseError):
    """A kernel or instance asked for is not in the database."""


class IncompatibleDatabaseError(DatabaseError):
    """Two databases (or a database and a writer) disagree on the recorded address range."""


class TransferError(DatabaseError):
    """A copy or move that would lose or corrupt data, refused."""


class JSONLimitError(MnemeError, ValueError):
    """A metadata document breaks a reading limit (a non-finite number, a duplicate key).

    Not a DatabaseError: metadata.py turns every ValueError of a document into its
    caller's error (CorruptDataError), so this never reaches the user itself."""
