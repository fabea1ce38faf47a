/**
 * `receipt`: a Spool handler in JavaScript, built into a component with componentize-js.
 *
 * Payload: {"order": "A-17", "currency": "EUR",
 *           "items": [{"name": "tea", "qty": 2, "price": 3.5}, ...],
 *           "fail_until_attempt": 2}
 * ("currency" is optional, default "EUR"; "fail_until_attempt" is optional, for tests.)
 * Result:  {"receipt_number": 7, "order": "A-17", "total": 7, "currency": "EUR", "items": 1}
 *
 * The receipt number comes from the task type's key-value store, assigned once per task through
 * the effect ledger: a retried attempt finds the effect recorded and reuses the number it stored,
 * so a retry never burns a second number. A bad payload fails permanently (no retry can fix it).
 * With "fail_until_attempt": K, attempts before K fail with `retry` after the number is assigned,
 * which shows a retry reusing its number.
 */

import { effectDone, kvGet, kvSet, log, progress, recordEffect } from 'spool:task/host@0.1.0';

/**
 * A thrown plain object `{tag, val}` becomes the `err` side of `result<string, failure>`:
 * `fail` ends the task at once, `retry` runs it again while attempts remain.
 */
function failure(tag, message) {
  return { tag, val: message };
}

/** Parses and checks the payload; throws a permanent failure when it is not a valid receipt. */
function parseReceipt(payload) {
  let request;
  try {
    request = JSON.parse(payload);
  } catch (error) {
    throw failure('fail', `payload is not JSON: ${error.message}`);
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw failure('fail', 'payload must be a JSON object');
  }
  if (request.order === undefined || request.order === null) {
    throw failure('fail', 'payload has no "order"');
  }
  if (!Array.isArray(request.items)) {
    throw failure('fail', 'payload has no "items" list');
  }
  const currency = request.currency ?? 'EUR';
  if (typeof currency !== 'string') {
    throw failure('fail', '"currency" must be a string');
  }
  let total = 0;
  request.items.forEach((item, index) => {
    for (const field of ['qty', 'price']) {
      const value = item?.[field];
      if (value === undefined) {
        throw failure('fail', `items[${index}] has no "${field}"`);
      }
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        throw failure('fail', `items[${index}].${field} is not a number: ${JSON.stringify(value)}`);
      }
    }
    total += item.qty * item.price;
  });
  return {
    order: String(request.order),
    items: request.items,
    currency,
    total: Math.round(total * 100) / 100,
    failUntilAttempt: request.fail_until_attempt,
  };
}

/**
 * Returns this task's receipt number, taking the next one from the store on the first attempt
 * and the stored one on every later attempt. `task.id` is a BigInt (WIT u64).
 */
function receiptNumber(taskId) {
  const effect = `receipt-number:${taskId}`;
  if (effectDone(effect)) {
    return Number.parseInt(kvGet(`number-of:${taskId}`) ?? '0', 10);
  }
  const number = Number.parseInt(kvGet('last-number') ?? '0', 10) + 1;
  kvSet('last-number', String(number));
  kvSet(`number-of:${taskId}`, String(number));
  recordEffect(effect);
  return number;
}

/** The world's export: runs one attempt and returns the result as JSON text. */
export function handle(task, payload) {
  const receipt = parseReceipt(payload);

  log('info', `receipt for order ${receipt.order}: ${receipt.items.length} items, attempt ${task.attempt}`);
  progress(50, 'total computed');

  const number = receiptNumber(task.id);

  if (typeof receipt.failUntilAttempt === 'number' && task.attempt < receipt.failUntilAttempt) {
    throw failure(
      'retry',
      `failing on purpose until attempt ${receipt.failUntilAttempt} (this is attempt ${task.attempt})`,
    );
  }

  progress(100, 'receipt ready');
  return JSON.stringify({
    receipt_number: number,
    order: receipt.order,
    total: receipt.total,
    currency: receipt.currency,
    items: receipt.items.length,
  });
}
