"""The one exception type of the data pipeline: bad corpus input, named by file and line.

Usage: ``raise CorpusError("expected 10 columns, found 3", path=path, line=17)``; printed as ``path:17: expected ...``.
"""
from __future__ import annotations

import os


class CorpusError(ValueError):
    """Malformed, empty, missing or mismatched corpus input.

    ``path`` and ``line`` (1-based) locate the problem when known; ``str(error)`` starts with them so that a command
    line can print the message alone, with no traceback, and the user can open the file at that line. ``option``
    names the reading option (keyword) to change when one is at fault; a command line shows it as its flag.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None,
                 option: str | None = None):
        self.message = message
        self.option = option  # the reading option (e.g. "format", "tag_column") the user should change, if one
        self.path = None if path is None else os.fspath(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
