"""`__NAME__`: a Spool task handler in Python, built into a component by componentize-py.

Payload: {"text": "..."}. Result: {"task_type": "__NAME__", "attempt": 1, "length": 5}.
Build it into the plugin folder with `spool plugin build` (see README.md).

The class must be named WitWorld (componentize-py looks it up by that name) and its `handle`
returns a str. An exception other than Err(...) stops the attempt: the task's error shows the
exception's type, message and the last lines of its traceback, and the task is retried while
attempts remain. `@checked` (spool_handler.py) fails the task with a clear message when
`handle` returns something other than a str.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import host
from wit_world.imports.types import Failure_Fail, TaskInfo

from spool_handler import checked


class WitWorld(WitWorld):
    @checked
    def handle(self, task: TaskInfo, payload: str) -> str:
        # A payload that does not parse fails permanently (Failure_Fail): retrying cannot fix it.
        # Raise Err(Failure_Retry("...")) for a problem another attempt may not have.
        try:
            text = json.loads(payload)["text"]
            if not isinstance(text, str):
                raise TypeError("text must be a string")
        except (ValueError, KeyError, TypeError) as error:
            raise Err(Failure_Fail(f"payload is not valid: {error!r}"))

        host.log(host.Level.INFO, f"handling task {task.id} (attempt {task.attempt} of {task.max_attempts})")

        # Do the work here.
        length = len(text)

        host.progress(100, "done")
        return json.dumps({"task_type": task.task_type, "attempt": task.attempt, "length": length})
