/* A small JSON reader and writer for Spool handlers written in C (see json.h).
 *
 * The reader follows RFC 8259 strictly: no comments, no trailing commas, no leading zeros,
 * no control characters inside strings, nothing but whitespace after the value. It is a
 * recursive descent parser with a depth limit.
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Reading ---------------------------------------------------------------------------- */

typedef struct {
    const char *start;
    const char *p;
    const char *end;
    int depth;
    char *error;
    size_t error_size;
} parser;

/* Records the first error (with the offset where it happened) and returns 0. */
static int fail(parser *ps, const char *message) {
    if (ps->error && ps->error_size > 0 && ps->error[0] == '\0') {
        snprintf(ps->error, ps->error_size, "%s at offset %zu", message, (size_t)(ps->p - ps->start));
    }
    return 0;
}

static void skip_whitespace(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) {
        ps->p++;
    }
}

/* Consumes `word` (true, false, null) if the text continues with it. */
static int literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        return fail(ps, "invalid literal");
    }
    ps->p += n;
    return 1;
}

static int hex4(parser *ps, unsigned *out) {
    unsigned value = 0;
    if (ps->end - ps->p < 4) {
        return fail(ps, "truncated \\u escape");
    }
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        value <<= 4;
        if (c >= '0' && c <= '9') {
            value |= (unsigned)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            value |= (unsigned)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            value |= (unsigned)(c - 'A' + 10);
        } else {
            ps->p--;
            return fail(ps, "invalid hex digit in \\u escape");
        }
    }
    *out = value;
    return 1;
}

/* Writes code point `cp` as UTF-8 at `out`; returns the number of bytes (1 to 4). */
static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string starting at its opening quote into a new NUL-terminated buffer. The decoded
 * text is never longer than its source (every escape is at least as long as its UTF-8), so
 * one allocation of the source length is enough. */
static int parse_string(parser *ps, char **chars, size_t *len) {
    ps->p++; /* the opening quote */
    const char *close = ps->p;
    while (close < ps->end && *close != '"') {
        close += (*close == '\\' && close + 1 < ps->end) ? 2 : 1;
    }
    if (close >= ps->end) {
        return fail(ps, "unterminated string");
    }
    char *out = malloc((size_t)(close - ps->p) + 1);
    if (!out) {
        return fail(ps, "out of memory");
    }
    size_t n = 0;
    while (ps->p < close) {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            free(out);
            return fail(ps, "control character in string");
        }
        if (c != '\\') {
            out[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!hex4(ps, &cp)) {
                free(out);
                return 0;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* A high surrogate must be followed by an escaped low surrogate. */
                unsigned low;
                if (close - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    free(out);
                    return fail(ps, "unpaired surrogate in \\u escape");
                }
                ps->p += 2;
                if (!hex4(ps, &low)) {
                    free(out);
                    return 0;
                }
                if (low < 0xDC00 || low > 0xDFFF) {
                    free(out);
                    return fail(ps, "unpaired surrogate in \\u escape");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(out);
                return fail(ps, "unpaired surrogate in \\u escape");
            }
            n += put_utf8(out + n, cp);
            break;
        }
        default:
            ps->p--;
            free(out);
            return fail(ps, "invalid escape in string");
        }
    }
    ps->p = close + 1;
    out[n] = '\0';
    *chars = out;
    *len = n;
    return 1;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Checks the JSON number grammar, then converts the span with strtod. */
static int parse_number(parser *ps, double *out) {
    const char *begin = ps->p;
    const char *q = ps->p;
    if (q < ps->end && *q == '-') {
        q++;
    }
    if (q < ps->end && *q == '0') {
        q++;
    } else if (q < ps->end && is_digit(*q)) {
        while (q < ps->end && is_digit(*q)) q++;
    } else {
        return fail(ps, "invalid number");
    }
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || !is_digit(*q)) {
            ps->p = q;
            return fail(ps, "expected a digit after '.'");
        }
        while (q < ps->end && is_digit(*q)) q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || !is_digit(*q)) {
            ps->p = q;
            return fail(ps, "expected a digit in the exponent");
        }
        while (q < ps->end && is_digit(*q)) q++;
    }
    /* strtod needs a NUL-terminated copy, since the text need not end after the number. */
    size_t n = (size_t)(q - begin);
    char small[64];
    char *copy = n < sizeof small ? small : malloc(n + 1);
    if (!copy) {
        return fail(ps, "out of memory");
    }
    memcpy(copy, begin, n);
    copy[n] = '\0';
    errno = 0;
    double value = strtod(copy, NULL);
    int overflow = errno == ERANGE && isinf(value);
    if (copy != small) {
        free(copy);
    }
    if (overflow) {
        return fail(ps, "number out of range");
    }
    ps->p = q;
    *out = value;
    return 1;
}

static int parse_value(parser *ps, json_value *out);
static void free_value(json_value *value);

/* Makes room for one more element of `size` bytes in a growing array. */
static int reserve(void **items, size_t len, size_t *cap, size_t size) {
    if (len < *cap) {
        return 1;
    }
    size_t next = *cap ? *cap * 2 : 4;
    void *grown = realloc(*items, next * size);
    if (!grown) {
        return 0;
    }
    *items = grown;
    *cap = next;
    return 1;
}

static int parse_array(parser *ps, json_value *out) {
    json_value *items = NULL;
    size_t len = 0, cap = 0;
    ps->p++; /* '[' */
    skip_whitespace(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;;) {
            if (!reserve((void **)&items, len, &cap, sizeof *items)) {
                fail(ps, "out of memory");
                goto error;
            }
            if (!parse_value(ps, &items[len])) goto error;
            len++;
            skip_whitespace(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                break;
            }
            fail(ps, "expected ',' or ']'");
            goto error;
        }
    }
    out->type = JSON_ARRAY;
    out->as.array.items = items;
    out->as.array.len = len;
    return 1;
error:
    for (size_t i = 0; i < len; i++) free_value(&items[i]);
    free(items);
    return 0;
}

static int parse_object(parser *ps, json_value *out) {
    json_member *members = NULL;
    size_t len = 0, cap = 0;
    ps->p++; /* '{' */
    skip_whitespace(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            skip_whitespace(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a string key");
                goto error;
            }
            if (!reserve((void **)&members, len, &cap, sizeof *members)) {
                fail(ps, "out of memory");
                goto error;
            }
            json_member *m = &members[len];
            if (!parse_string(ps, &m->key, &m->key_len)) goto error;
            skip_whitespace(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(m->key);
                fail(ps, "expected ':'");
                goto error;
            }
            ps->p++;
            if (!parse_value(ps, &m->value)) {
                free(m->key);
                goto error;
            }
            len++;
            skip_whitespace(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == '}') {
                ps->p++;
                break;
            }
            fail(ps, "expected ',' or '}'");
            goto error;
        }
    }
    out->type = JSON_OBJECT;
    out->as.object.members = members;
    out->as.object.len = len;
    return 1;
error:
    for (size_t i = 0; i < len; i++) {
        free(members[i].key);
        free_value(&members[i].value);
    }
    free(members);
    return 0;
}

/* Parses one value, after optional whitespace, into `out`. On failure `out` holds nothing
 * that needs freeing. */
static int parse_value(parser *ps, json_value *out) {
    skip_whitespace(ps);
    if (ps->p >= ps->end) {
        return fail(ps, "unexpected end of input");
    }
    switch (*ps->p) {
    case '{':
    case '[': {
        if (ps->depth >= JSON_MAX_DEPTH) {
            return fail(ps, "nesting too deep");
        }
        ps->depth++;
        int ok = *ps->p == '{' ? parse_object(ps, out) : parse_array(ps, out);
        ps->depth--;
        return ok;
    }
    case '"':
        out->type = JSON_STRING;
        return parse_string(ps, &out->as.string.chars, &out->as.string.len);
    case 't':
        out->type = JSON_BOOL;
        out->as.boolean = 1;
        return literal(ps, "true");
    case 'f':
        out->type = JSON_BOOL;
        out->as.boolean = 0;
        return literal(ps, "false");
    case 'n':
        out->type = JSON_NULL;
        return literal(ps, "null");
    default:
        if (*ps->p != '-' && !is_digit(*ps->p)) {
            return fail(ps, "unexpected character");
        }
        out->type = JSON_NUMBER;
        return parse_number(ps, &out->as.number);
    }
}

json_value *json_parse(const char *text, size_t len, char *error, size_t error_size) {
    parser ps = {text, text, text + len, 0, error, error_size};
    if (error && error_size > 0) {
        error[0] = '\0';
    }
    json_value *root = malloc(sizeof *root);
    if (!root) {
        fail(&ps, "out of memory");
        return NULL;
    }
    if (!parse_value(&ps, root)) {
        free(root);
        return NULL;
    }
    skip_whitespace(&ps);
    if (ps.p != ps.end) {
        fail(&ps, "unexpected text after the value");
        json_free(root);
        return NULL;
    }
    return root;
}

static void free_value(json_value *value) {
    switch (value->type) {
    case JSON_STRING:
        free(value->as.string.chars);
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < value->as.array.len; i++) free_value(&value->as.array.items[i]);
        free(value->as.array.items);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < value->as.object.len; i++) {
            free(value->as.object.members[i].key);
            free_value(&value->as.object.members[i].value);
        }
        free(value->as.object.members);
        break;
    default:
        break;
    }
}

void json_free(json_value *root) {
    if (root) {
        free_value(root);
        free(root);
    }
}

const json_value *json_get(const json_value *object, const char *key) {
    if (!object || object->type != JSON_OBJECT) {
        return NULL;
    }
    size_t n = strlen(key);
    for (size_t i = object->as.object.len; i > 0; i--) {
        const json_member *m = &object->as.object.members[i - 1];
        if (m->key_len == n && memcmp(m->key, key, n) == 0) {
            return &m->value;
        }
    }
    return NULL;
}

/* ---- Writing ---------------------------------------------------------------------------- */

static void append(json_buf *buf, const char *s, size_t n) {
    if (buf->failed) {
        return;
    }
    if (buf->len + n + 1 > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 64;
        while (cap < buf->len + n + 1) cap *= 2;
        char *grown = realloc(buf->data, cap);
        if (!grown) {
            buf->failed = 1;
            return;
        }
        buf->data = grown;
        buf->cap = cap;
    }
    memcpy(buf->data + buf->len, s, n);
    buf->len += n;
    buf->data[buf->len] = '\0';
}

void json_buf_raw(json_buf *buf, const char *s) {
    append(buf, s, strlen(s));
}

void json_buf_string(json_buf *buf, const char *s, size_t len) {
    append(buf, "\"", 1);
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *escape = NULL;
        char hex[7];
        switch (c) {
        case '"': escape = "\\\""; break;
        case '\\': escape = "\\\\"; break;
        case '\n': escape = "\\n"; break;
        case '\r': escape = "\\r"; break;
        case '\t': escape = "\\t"; break;
        case '\b': escape = "\\b"; break;
        case '\f': escape = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof hex, "\\u%04x", c);
                escape = hex;
            }
        }
        if (escape) {
            append(buf, s + run, i - run);
            json_buf_raw(buf, escape);
            run = i + 1;
        }
    }
    append(buf, s + run, len - run);
    append(buf, "\"", 1);
}

void json_buf_number(json_buf *buf, double value) {
    if (!isfinite(value)) {
        json_buf_raw(buf, "null");
        return;
    }
    /* The fewest significant digits that read back as the same double (17 always do). */
    char text[32];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, value);
        if (strtod(text, NULL) == value) {
            break;
        }
    }
    json_buf_raw(buf, text);
}

void json_buf_uint(json_buf *buf, uint64_t value) {
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long)value);
    json_buf_raw(buf, text);
}

void json_buf_free(json_buf *buf) {
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
