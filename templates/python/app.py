"""`__NAME__`: a Spool task handler in Python, built into a component by componentize-py.

Payload: {"text": "..."}. Result: {"task_type": "__NAME__", "attempt": 1, "length": 5}.
Build it into the plugin folder with `spool plugin build` (see README.md).
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import host
from wit_world.imports.types import Failure_Fail, TaskInfo


class WitWorld(WitWorld):
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
