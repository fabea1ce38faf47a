"""Checks for a Spool handler written in Python (part of the project `spool plugin new` made).

`@checked` on the `handle` method turns the mistakes componentize-py would only report as a
crash of its runtime into a failure that says what to change:
- `handle` must return a `str` (JSON text by convention): returning a dict, a list or None
  fails the task with "return json.dumps(result)";
- a plain exception (a bug) is left alone: the attempt stops, the host shows the exception's
  type, message and the last lines of its traceback, and the task is retried while attempts
  remain.
"""

import functools

from componentize_py_types import Err
from wit_world.imports.types import Failure_Fail


def checked(handle):
    """Wraps `WitWorld.handle` so that a result that is not a `str` fails with a clear message."""

    @functools.wraps(handle)
    def checked_handle(self, task, payload):
        result = handle(self, task, payload)
        if not isinstance(result, str):
            kind = type(result).__name__
            raise Err(
                Failure_Fail(
                    f"handle returned a {kind}, but a handler returns a str (JSON text): "
                    "return json.dumps(result)"
                )
            )
        return result

    return checked_handle
