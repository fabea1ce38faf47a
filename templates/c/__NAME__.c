/* `__NAME__`: a Spool task handler written in C.
 *
 * Payload:  {"text": "hello"}
 * Result:   {"task_type": "__NAME__", "attempt": 1, "length": 5}
 *
 * The host calls exports_handler_handle once per attempt of a task. handler.h (generated
 * from wit/handler.wit when the handler is built) declares it and the host's services:
 * spool_task_host_log, _progress, _kv_get/_kv_set/_kv_delete, _effect_done/_record_effect
 * and _enqueue. json.h is a small JSON reader and writer.
 *
 * Memory rules of the generated bindings: the handler owns `task` and `payload` and frees
 * them; the strings it returns in `ret` or `err` must come from malloc, because the bindings
 * free() them once the host has copied them.
 */
#include <stdio.h>
#include <string.h>

#include "handler.h"
#include "json.h"

/* Reports a permanent failure (no retry can fix a bad payload). Returns false, which tells
 * the bindings that `err` holds the outcome. Use SPOOL_TASK_TYPES_FAILURE_RETRY and
 * err->val.retry instead for a transient problem worth retrying. */
static bool fail(handler_failure_t *err, const char *message) {
    err->tag = SPOOL_TASK_TYPES_FAILURE_FAIL;
    handler_string_dup(&err->val.fail, message); /* a malloc'd copy */
    return false;
}

bool exports_handler_handle(handler_task_info_t *task, handler_string_t *payload, handler_string_t *ret,
                            handler_failure_t *err) {
    bool ok = false;
    char error[128];

    /* The payload is JSON text (not NUL-terminated). */
    json_value *request = json_parse((const char *)payload->ptr, payload->len, error, sizeof error);
    const json_value *text = json_get(request, "text");
    if (!request) {
        char message[160];
        snprintf(message, sizeof message, "payload is not valid JSON: %s", error);
        ok = fail(err, message);
    } else if (!text || text->type != JSON_STRING) {
        ok = fail(err, "payload needs \"text\": a string");
    } else {
        /* Length in characters: count the bytes that start a UTF-8 character. */
        size_t length = 0;
        for (size_t i = 0; i < text->as.string.len; i++) {
            length += ((unsigned char)text->as.string.chars[i] & 0xC0) != 0x80;
        }

        /* Log lines show up in the task's status and in the host's log. */
        char line[96];
        snprintf(line, sizeof line, "measuring %zu characters, attempt %u", length, (unsigned)task->attempt);
        handler_string_t message;
        handler_string_set(&message, line); /* borrows `line`: nothing to free */
        spool_task_host_log(SPOOL_TASK_HOST_LEVEL_INFO, &message);

        /* Build the result; its buffer is malloc'd, so it can be handed over as it is. */
        json_buf out = {0};
        json_buf_raw(&out, "{\"task_type\": ");
        json_buf_string(&out, (const char *)task->task_type.ptr, task->task_type.len);
        json_buf_raw(&out, ", \"attempt\": ");
        json_buf_uint(&out, task->attempt);
        json_buf_raw(&out, ", \"length\": ");
        json_buf_uint(&out, length);
        json_buf_raw(&out, "}");
        if (out.failed) {
            json_buf_free(&out);
            ok = fail(err, "out of memory");
        } else {
            handler_string_t done;
            handler_string_set(&done, "done");
            spool_task_host_progress(100, &done);
            ret->ptr = (uint8_t *)out.data;
            ret->len = out.len;
            ok = true;
        }
    }

    /* Free what the handler owns: the parsed JSON and its two arguments. */
    json_free(request);
    handler_string_free(payload);
    handler_task_info_free(task);
    return ok;
}
