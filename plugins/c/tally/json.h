/* A small JSON reader and writer for Spool handlers written in C.
 *
 * Reading: json_parse turns JSON text into a tree of json_value nodes (objects, arrays,
 * strings with escapes decoded to UTF-8, numbers as doubles, true/false/null); json_free
 * releases it. Writing: json_buf collects JSON text in a heap buffer whose bytes the caller
 * can hand on as they are (for instance as a handler's result, freed later with free()).
 */
#ifndef SPOOL_JSON_H
#define SPOOL_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
typedef struct json_member json_member;

struct json_value {
    json_type type;
    union {
        int boolean;  /* JSON_BOOL: 0 or 1 */
        double number; /* JSON_NUMBER */
        /* JSON_STRING: UTF-8 bytes, NUL-terminated (len excludes the NUL; the text itself
         * may hold a NUL written as \u0000). */
        struct {
            char *chars;
            size_t len;
        } string;
        struct {
            json_value *items;
            size_t len;
        } array; /* JSON_ARRAY */
        struct {
            json_member *members;
            size_t len;
        } object; /* JSON_OBJECT: members in the order of the text */
    } as;
};

struct json_member {
    char *key; /* NUL-terminated like a string value */
    size_t key_len;
    json_value value;
};

/* Parses the `len` bytes at `text` (need not be NUL-terminated). Returns the root value, to
 * be released with json_free, or NULL with a message such as "expected ':' at offset 12"
 * written into `error` (at most `error_size` bytes, NUL-terminated). Nesting deeper than
 * JSON_MAX_DEPTH is refused rather than risking the stack. */
#define JSON_MAX_DEPTH 128
json_value *json_parse(const char *text, size_t len, char *error, size_t error_size);

/* Releases a tree returned by json_parse (NULL is allowed). */
void json_free(json_value *root);

/* The member `key` of an object (the last one when the key repeats), or NULL when `object`
 * is NULL, not an object, or has no such member. */
const json_value *json_get(const json_value *object, const char *key);

/* A growing buffer of JSON text. Appending never fails loudly: after an allocation failure
 * `failed` is set and further appends do nothing, so check it once at the end. */
typedef struct {
    char *data; /* malloc'd, NUL-terminated when not empty; NULL when nothing was appended */
    size_t len;
    size_t cap;
    int failed;
} json_buf;

/* Appends `s` as it is (it must already be JSON text, such as "{" or "\"key\": "). */
void json_buf_raw(json_buf *buf, const char *s);
/* Appends `len` bytes of UTF-8 text as a quoted JSON string, escaping as needed. */
void json_buf_string(json_buf *buf, const char *s, size_t len);
/* Appends a number in the shortest form that reads back as the same double; a value that
 * JSON cannot express (infinity, NaN) is written as null. */
void json_buf_number(json_buf *buf, double value);
/* Appends an unsigned integer. */
void json_buf_uint(json_buf *buf, uint64_t value);
/* Releases the buffer's memory (for when its text is not handed on). */
void json_buf_free(json_buf *buf);

#endif
