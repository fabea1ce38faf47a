"""`invoice`: a Spool handler in Python, built into a component with componentize-py.

Payload:  {"customer": "ACME", "email": "ap@acme.example",
           "lines": [{"item": "widget", "qty": 3, "price": 2.5}, ...]}
Result:   {"invoice_number": 7, "customer": "ACME", "total": 7.5, "lines": 1}

The invoice number comes from the task type's key-value store, assigned once per task through
the effect ledger: a retried attempt finds the effect recorded and reuses the number it stored,
so a retry never burns a second number. A bad payload fails permanently (no retry can fix it).
`"fail_until_attempt": K` in the payload fails transiently until attempt K, to show retries.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import host
from wit_world.imports.types import Failure_Fail, Failure_Retry, TaskInfo


class WitWorld(WitWorld):
    def handle(self, task: TaskInfo, payload: str) -> str:
        try:
            request = json.loads(payload)
            customer = str(request["customer"])
            lines = request["lines"]
            total = sum(float(line["qty"]) * float(line["price"]) for line in lines)
        except (ValueError, KeyError, TypeError) as error:
            raise Err(Failure_Fail(f"payload is not a valid invoice: {error!r}"))

        host.log(host.Level.INFO, f"invoicing {customer}: {len(lines)} lines, attempt {task.attempt}")
        host.progress(50, "total computed")

        effect = f"invoice-number:{task.id}"
        if host.effect_done(effect):
            number = int(host.kv_get(f"number-of:{task.id}") or "0")
        else:
            number = int(host.kv_get("last-number") or "0") + 1
            host.kv_set("last-number", str(number))
            host.kv_set(f"number-of:{task.id}", str(number))
            host.record_effect(effect)

        # A demonstration hook: fail transiently until the given attempt (the host retries).
        if task.attempt < int(request.get("fail_until_attempt", 0)):
            raise Err(Failure_Retry(f"failing on purpose until attempt {request['fail_until_attempt']}"))

        host.progress(100, "invoice ready")
        return json.dumps({"invoice_number": number, "customer": customer, "total": round(total, 2), "lines": len(lines)})
