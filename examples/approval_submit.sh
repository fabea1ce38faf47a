#!/usr/bin/env bash
# The essay's approval-submit endpoint, as a web app would do it with Spool: write the approval
# record in the request, and hand the slow work (notify, report) to the queue in one batch.
# The idempotency keys make a retried submit (a double click, a proxy retry) enqueue nothing twice.
#
# Run a host first (`cargo xtask demo` leaves one serving), then: examples/approval_submit.sh A-1042
set -euo pipefail
approval="${1:-A-1042}"
url="${SPOOL_URL:-http://127.0.0.1:8787}"
auth=()
if [ -n "${SPOOL_API_TOKEN:-}" ]; then auth=(-H "Authorization: Bearer $SPOOL_API_TOKEN"); fi

curl -sS --fail-with-body "${auth[@]}" -H 'content-type: application/json' "$url/tasks/batch" -d @- <<JSON
{"tasks": [
  {"task_type": "notify", "priority": 10, "idempotency_key": "approval-$approval-mail",
   "payload": {"channel": "email", "to": "approver@example.com",
               "subject": "Approval {{id}} submitted",
               "template": "Hello {{name}}, approval {{id}} is waiting for you.",
               "vars": {"name": "Dana", "id": "$approval"}}},
  {"task_type": "report", "priority": 0, "idempotency_key": "approval-$approval-report",
   "payload": {"title": "Approval $approval", "group_by": "region", "sum": "amount",
               "rows": [{"region": "north", "amount": 1200}, {"region": "south", "amount": 800},
                        {"region": "north", "amount": 450}]}}
]}
JSON
echo
