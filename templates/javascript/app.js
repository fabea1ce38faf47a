/**
 * `__NAME__`: a Spool task handler in JavaScript, built into a component by componentize-js.
 *
 * Payload: {"text": "..."}. Result: {"task_type": "__NAME__", "attempt": 1, "length": 5}.
 * Build it into the plugin folder with `spool plugin build` (see README.md).
 */

// The host's services (log, progress, kvGet, kvSet, kvDelete, effectDone, recordEffect,
// enqueue) come from this module; WIT names like `kv-get` become camelCase (`kvGet`).
import { log, progress } from 'spool:task/host@0.1.0';

/**
 * Runs one attempt of a task. `task` is {id (a BigInt), taskType, attempt, maxAttempts,
 * idempotencyKey (a string or undefined)}; `payload` is the task's JSON text.
 * Return the result as a string (by convention JSON text). To fail, throw a plain object:
 * {tag: 'fail', val: 'message'} fails the task at once (retrying cannot fix it),
 * {tag: 'retry', val: 'message'} runs it again while attempts remain,
 * {tag: 'snooze', val: seconds} runs it again later without using up an attempt.
 * Anything else thrown (an Error from a bug) stops the instance: the attempt fails and is
 * retried while attempts remain, and the task's error shows the Error's message and where it
 * was thrown.
 */
export function handle(task, payload) {
  let result;
  try {
    result = work(task, payload);
  } catch (error) {
    if (error instanceof Error) {
      // Where the error was thrown: the host shows these frames with the task's error.
      console.error(`${error.name}: ${error.message}\n${error.stack}`);
    }
    throw error;
  }
  if (typeof result !== 'string') {
    throw { tag: 'fail', val: `handle returned ${describe(result)}, but a handler returns a string (JSON text): return JSON.stringify(result)` };
  }
  return result;
}

/** The handler's own work: returns the result as a string. */
function work(task, payload) {
  let request;
  try {
    request = JSON.parse(payload);
  } catch (error) {
    throw { tag: 'fail', val: `payload is not JSON: ${error.message}` };
  }
  const text = request?.text;
  if (typeof text !== 'string') {
    throw { tag: 'fail', val: 'payload needs a string field "text"' };
  }

  log('info', `handling task ${task.id} (attempt ${task.attempt} of ${task.maxAttempts})`);

  // Do the work here. Counting with [...text] counts characters, not UTF-16 code units.
  const length = [...text].length;

  progress(100, 'done');
  return JSON.stringify({ task_type: task.taskType, attempt: task.attempt, length });
}

/** What a value is, for the message about a result that is not a string. */
function describe(value) {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
