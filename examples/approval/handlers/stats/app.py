"""`stats`: keeps the approval statistics cache up to date, in the task type's key-value store.

Payload:  {"approval_id": 42, "approver": "dana", "amount_cents": 125000}
Result:   {"approver": "dana", "approvals": 17, "total_cents": 2125000, "applied": true}

The cache holds one JSON value per approver, under the key `approver:<name>`, and one for all
approvals, under `all`: {"approvals": n, "total_cents": t, "last_approval_id": id}. A
dashboard reads these few values instead of summing the approvals table on every view.

Each approval is counted once: the effect `approval:<id>` in the ledger says it was, so a
retried task, or the same approval enqueued twice, changes nothing the second time. The one
gap is a host dying between the writes and the record: the next attempt counts the approval
again. Reading a value and writing it back is not atomic, so the manifest runs one `stats`
task at a time (`concurrency = 1`); several hosts would each run one.

A payload that is not an approval fails permanently: no retry can fix it.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import host
from wit_world.imports.types import Failure_Fail, TaskInfo


def add(key: str, approval_id: int, amount_cents: int) -> dict:
    """Adds one approval to the cached statistics under `key` and returns them."""
    stats = json.loads(host.kv_get(key) or '{"approvals": 0, "total_cents": 0}')
    stats["approvals"] += 1
    stats["total_cents"] += amount_cents
    stats["last_approval_id"] = max(approval_id, stats.get("last_approval_id", 0))
    host.kv_set(key, json.dumps(stats, sort_keys=True))
    return stats


class WitWorld(WitWorld):
    def handle(self, task: TaskInfo, payload: str) -> str:
        try:
            request = json.loads(payload)
            approval_id = int(request["approval_id"])
            approver = str(request["approver"])
            amount_cents = int(request["amount_cents"])
        except (ValueError, KeyError, TypeError) as error:
            raise Err(Failure_Fail(f"payload is not an approval: {error!r}"))

        key = f"approver:{approver}"
        effect = f"approval:{approval_id}"
        if host.effect_done(effect):
            host.log(host.Level.INFO, f"approval {approval_id} is already counted")
            stats = json.loads(host.kv_get(key) or "{}")
            applied = False
        else:
            stats = add(key, approval_id, amount_cents)
            add("all", approval_id, amount_cents)
            host.record_effect(effect)
            host.log(host.Level.INFO, f"approval {approval_id} counted for {approver}: {stats}")
            applied = True
        host.progress(100, "statistics cached")
        return json.dumps({"approver": approver, "applied": applied, **stats}, sort_keys=True)
