/* Reading JSON documents: files, parsing, and values checked by type and
 * range, each error naming where it is (json-impl.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "json-impl.h"

kp_status kp__json_read_file(const char *path, char **text, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return kp__error(KP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    kp_status st = KP_OK;
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = kp__error(KP_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    else if ((size_t)n > KP__JSON_MAX_BYTES)
        st = kp__error(KP_ERR_IO, "%s: %ld bytes, larger than the %zu MiB a JSON file may have",
                       path, n, KP__JSON_MAX_BYTES >> 20);
    char *buf = st == KP_OK ? kp__malloc((size_t)n + 1) : NULL;
    if (st == KP_OK && !buf)
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for its %ld bytes", path, n);
    if (st == KP_OK && fread(buf, 1, (size_t)n, f) != (size_t)n)
        st = kp__error(KP_ERR_IO, "%s: cannot read: %s", path,
                       ferror(f) ? strerror(errno) : "it became shorter while read");
    fclose(f);
    if (st != KP_OK) {
        kp__free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *size = (size_t)n;
    return KP_OK;
}

/* A NUL byte would end the text early and hide what follows it. */
static kp_status kp__json_no_nul(const char *text, size_t size) {
    const char *z = memchr(text, '\0', size);
    if (!z) return KP_OK;
    int line = 1, col = 1;
    for (const char *c = text; c < z; c++, col++)
        if (*c == '\n') {
            line++;
            col = 0;
        }
    return KP__PERR("line %d, column %d: a NUL byte (the text must not contain one)", line, col);
}

kp_status kp__json_parse(const char *text, size_t size, json_t **root) {
    KP_CHECK(kp__json_no_nul(text, size));
    json_error_t jerr;
    *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root) return KP__PERR("line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    return KP_OK;
}

const char *kp__json_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

kp_status kp__json_only_keys(json_t *obj, const char *path, const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, key) == 0;
        if (!ok) return KP__PERR("%s.%s: unknown key", path, key);
    }
    return KP_OK;
}

kp_status kp__json_int(json_t *v, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return KP__PERR("%s: expected an integer from %lld to %lld", path, (long long)lo,
                        (long long)hi);
    *out = json_integer_value(v);
    return KP_OK;
}

kp_status kp__json_count(json_t *v, const char *path, size_t max, size_t *out) {
    const int64_t hi = max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
    int64_t n = 0;
    KP_CHECK(kp__json_int(v, path, 0, hi, &n));
    *out = (size_t)n;
    return KP_OK;
}

kp_status kp__json_string(json_t *v, const char *path, const char **out) {
    if (!json_is_string(v)) return KP__PERR("%s: expected a string", path);
    *out = json_string_value(v);
    return KP_OK;
}

kp_status kp__json_bool(json_t *v, const char *path, bool *out) {
    if (!json_is_boolean(v)) return KP__PERR("%s: expected true or false", path);
    *out = json_is_true(v);
    return KP_OK;
}

/* "PATH.KEY" into buf, the path of an optional key. */
static const char *kp__json_key_path(char *buf, size_t len, const char *path, const char *key) {
    snprintf(buf, len, "%s.%s", path, key);
    return buf;
}

kp_status kp__json_opt_int(json_t *obj, const char *path, const char *key, int64_t lo,
                           int64_t hi, int64_t *out) {
    char sub[160];
    json_t *v = json_object_get(obj, key);
    return v ? kp__json_int(v, kp__json_key_path(sub, sizeof sub, path, key), lo, hi, out) : KP_OK;
}

kp_status kp__json_opt_bool(json_t *obj, const char *path, const char *key, bool *out) {
    char sub[160];
    json_t *v = json_object_get(obj, key);
    return v ? kp__json_bool(v, kp__json_key_path(sub, sizeof sub, path, key), out) : KP_OK;
}

kp_status kp__json_opt_string(json_t *obj, const char *path, const char *key,
                              const char *const *allowed, const char **out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return KP_OK;
    const char *t = json_string_value(v);
    bool ok = t != NULL;
    if (ok && allowed) {
        ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, t) == 0;
    }
    if (!ok) {
        char list[160] = "";
        for (const char *const *a = allowed; a && *a; a++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                     a == allowed ? "" : ", ", *a);
        return KP__PERR("%s.%s: expected %s%s", path, key, allowed ? "one of " : "a string", list);
    }
    *out = t;
    return KP_OK;
}
