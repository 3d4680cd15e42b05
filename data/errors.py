"""The one exception type of the data pipeline: bad corpus input, named by file and line; and the reading of a JSON
file whose errors name it (a vocabulary, a run's text.json, a cache entry's meta.json).

Usage: ``raise CorpusError("expected 10 columns, found 3", path=path, line=17)``; printed as ``path:17: expected ...``;
``read_json(path)`` -> the value, or CorpusError ``path:1:1: not valid JSON (Expecting value)``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class CorpusError(ValueError):
    """Malformed, empty, missing or mismatched corpus input.

    ``path`` and ``line`` (1-based) locate the problem when known; ``str(error)`` starts with them so that a command
    line can print the message alone, with no traceback, and the user can open the file at that line. ``option``
    names the reading option (keyword) to change when one is at fault; a command line shows it as its flag.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None,
                 option: str | None = None, column: int | None = None):
        self.message = message
        self.option = option  # the reading option (e.g. "format", "tag_column") the user should change, if one
        self.path = None if path is None else os.fspath(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += "" if line is None or column is None else f":{column}"
        super().__init__(f"{where}: {message}" if where else message)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in a file. A file that is not JSON text (a hand-edit's typo, another program's output written
    over it) raises CorpusError naming it with the line and column: json's own message names no file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise CorpusError(f"not JSON text (byte {error.start} is not {error.encoding})", path=path) from None
    except json.JSONDecodeError as error:
        raise CorpusError(f"not valid JSON ({error.msg})", path=path, line=error.lineno, column=error.colno) from None
