/* `tally`: a Spool handler in C that books a list of amounts as one numbered ledger entry.
 *
 * Payload:  {"account": "ops", "amounts": [12.5, 3, 4.25]}
 * Result:   {"entry_number": 7, "account": "ops", "total": 19.75, "count": 3}
 *
 * The entry number comes from the task type's key-value store ("last-number"), assigned once
 * per task through the effect ledger (effect "entry-number:<task id>", number kept under
 * "number-of:<task id>"): a retried attempt finds the effect recorded and reuses its number.
 * A bad payload fails permanently. Test hook: with "fail_until_attempt": K, attempts before
 * K fail with `retry` after the number is assigned, which shows the number being reused.
 *
 * Ownership (wit-bindgen's C conventions): the handler owns its arguments and frees them;
 * the result or failure strings must be malloc'd, since the bindings free() them after the
 * host has copied them; strings that imports return (kv-get) belong to the caller.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "json.h"

/* Makes a borrowed component string from a C string (for passing to an import). */
static handler_string_t str(const char *s) {
    handler_string_t out;
    handler_string_set(&out, s);
    return out;
}

static void progress(uint8_t percent, const char *note) {
    handler_string_t text = str(note);
    spool_task_host_progress(percent, &text);
}

/* Reads an unsigned counter from the key-value store; a missing key reads as 0. Returns 0
 * when the stored value is not a number. */
static int kv_get_number(const char *key, uint64_t *out) {
    handler_string_t k = str(key);
    handler_string_t value;
    *out = 0;
    if (!spool_task_host_kv_get(&k, &value)) {
        return 1;
    }
    char text[24];
    int ok = value.len > 0 && value.len < sizeof text;
    if (ok) {
        memcpy(text, value.ptr, value.len);
        text[value.len] = '\0';
        char *end;
        *out = strtoull(text, &end, 10);
        ok = *end == '\0' && text[0] >= '0' && text[0] <= '9';
    }
    handler_string_free(&value);
    return ok;
}

static void kv_set_number(const char *key, uint64_t number) {
    char text[24];
    snprintf(text, sizeof text, "%" PRIu64, number);
    handler_string_t k = str(key), v = str(text);
    spool_task_host_kv_set(&k, &v);
}

/* Sets `err` to a failure of kind `tag` with a copy of `message`; returns false, the value
 * the handler returns for a failure. */
static bool failure(handler_failure_t *err, uint8_t tag, const char *message) {
    err->tag = tag;
    if (tag == SPOOL_TASK_TYPES_FAILURE_RETRY) {
        handler_string_dup(&err->val.retry, message);
    } else {
        handler_string_dup(&err->val.fail, message);
    }
    return false;
}

/* The entry number of task `id`: the one stored by an earlier attempt, or the next one. */
static int entry_number(uint64_t id, uint64_t *number) {
    char effect[64], number_key[64];
    snprintf(effect, sizeof effect, "entry-number:%" PRIu64, id);
    snprintf(number_key, sizeof number_key, "number-of:%" PRIu64, id);

    handler_string_t effect_key = str(effect);
    if (spool_task_host_effect_done(&effect_key)) {
        return kv_get_number(number_key, number);
    }
    uint64_t last;
    if (!kv_get_number("last-number", &last)) {
        return 0;
    }
    *number = last + 1;
    kv_set_number("last-number", *number);
    kv_set_number(number_key, *number);
    spool_task_host_record_effect(&effect_key);
    return 1;
}

/* The handler itself; `ret` or `err` receives its outcome. */
static bool tally(const handler_task_info_t *task, const json_value *request, handler_string_t *ret,
                  handler_failure_t *err) {
    char message[256];
    const json_value *account = json_get(request, "account");
    const json_value *amounts = json_get(request, "amounts");
    const json_value *fail_until = json_get(request, "fail_until_attempt");
    if (!account || account->type != JSON_STRING) {
        return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "payload needs \"account\": a string");
    }
    if (!amounts || amounts->type != JSON_ARRAY) {
        return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "payload needs \"amounts\": an array of numbers");
    }
    if (fail_until && fail_until->type != JSON_NUMBER) {
        return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "\"fail_until_attempt\" must be a number");
    }

    double total = 0;
    size_t count = amounts->as.array.len;
    for (size_t i = 0; i < count; i++) {
        const json_value *amount = &amounts->as.array.items[i];
        if (amount->type != JSON_NUMBER) {
            snprintf(message, sizeof message, "amounts[%zu] is not a number", i);
            return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, message);
        }
        total += amount->as.number;
    }
    if (!isfinite(total)) {
        return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "the total is too large");
    }
    total = round(total * 100) / 100;

    /* Built on the heap: cutting the account name to fit a fixed buffer could split a UTF-8
     * character, and the host refuses strings that are not valid UTF-8. */
    json_buf line = {0};
    json_buf_raw(&line, "tallying ");
    json_buf_raw(&line, account->as.string.chars);
    snprintf(message, sizeof message, ": %zu amounts, attempt %" PRIu32, count, task->attempt);
    json_buf_raw(&line, message);
    if (!line.failed) {
        handler_string_t text = {(uint8_t *)line.data, line.len};
        spool_task_host_log(SPOOL_TASK_HOST_LEVEL_INFO, &text);
    }
    json_buf_free(&line);
    progress(50, "total computed");

    uint64_t number;
    if (!entry_number(task->id, &number)) {
        return failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "the key-value store holds a non-numeric entry number");
    }

    if (fail_until && task->attempt < fail_until->as.number) {
        snprintf(message, sizeof message, "failing attempt %" PRIu32 " on purpose (fail_until_attempt)",
                 task->attempt);
        return failure(err, SPOOL_TASK_TYPES_FAILURE_RETRY, message);
    }
    progress(100, "entry ready");

    json_buf out = {0};
    json_buf_raw(&out, "{\"entry_number\": ");
    json_buf_uint(&out, number);
    json_buf_raw(&out, ", \"account\": ");
    json_buf_string(&out, account->as.string.chars, account->as.string.len);
    json_buf_raw(&out, ", \"total\": ");
    json_buf_number(&out, total);
    json_buf_raw(&out, ", \"count\": ");
    json_buf_uint(&out, count);
    json_buf_raw(&out, "}");
    if (out.failed) {
        json_buf_free(&out);
        return failure(err, SPOOL_TASK_TYPES_FAILURE_RETRY, "out of memory");
    }
    /* The buffer is malloc'd: the bindings free it once the host has the result. */
    ret->ptr = (uint8_t *)out.data;
    ret->len = out.len;
    return true;
}

bool exports_handler_handle(handler_task_info_t *task, handler_string_t *payload, handler_string_t *ret,
                            handler_failure_t *err) {
    char error[128];
    json_value *request = json_parse((const char *)payload->ptr, payload->len, error, sizeof error);
    bool ok;
    if (!request) {
        char message[192];
        snprintf(message, sizeof message, "payload is not valid JSON: %s", error);
        ok = failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, message);
    } else if (request->type != JSON_OBJECT) {
        ok = failure(err, SPOOL_TASK_TYPES_FAILURE_FAIL, "payload must be a JSON object");
    } else {
        ok = tally(task, request, ret, err);
    }
    json_free(request);
    handler_string_free(payload);
    handler_task_info_free(task);
    return ok;
}
