/* `c_crash` (test handler): fails the way C code does.
 *
 * {"mode": "assert"}:  an assert() that does not hold; wasi-libc prints
 *                      "Assertion failed: ..." and aborts (a trap).
 * {"mode": "recurse"}: recursion with 4 KiB frames until the stack, which lives in linear
 *                      memory below the data, overflows past address 0 (a trap on an
 *                      out-of-bounds access).
 * Anything else succeeds with {}.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

/* Never returns: the condition cannot hold, but the compiler cannot know that. */
static int descend(volatile int depth) {
    volatile char frame[4096];
    frame[0] = (char)depth;
    frame[sizeof frame - 1] = (char)depth;
    if (depth < 0) {
        return 0;
    }
    return descend(depth + 1) + frame[0] + frame[sizeof frame - 1];
}

static int check_balance(int balance) {
    assert(balance >= 0 && "the ledger balance must not be negative");
    return balance;
}

bool exports_handler_handle(handler_task_info_t *task, handler_string_t *payload, handler_string_t *ret,
                            handler_failure_t *err) {
    (void)err;
    char *text = malloc(payload->len + 1);
    memcpy(text, payload->ptr, payload->len);
    text[payload->len] = '\0';
    if (strstr(text, "\"assert\"")) {
        check_balance(-1);
    } else if (strstr(text, "\"recurse\"")) {
        descend(0);
    }
    free(text);
    handler_string_dup(ret, "{}");
    handler_string_free(payload);
    handler_task_info_free(task);
    return true;
}
