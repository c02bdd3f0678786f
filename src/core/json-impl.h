/* Reading JSON documents (json.c, with jansson): the one set of helpers
 * the readers of pipeline specs (src/pipeline/spec_json.c) and of flows
 * (src/flow/json/) share. Besides core-impl.h, the one private header
 * every layer may include (tests/layering.py). Every error is
 * KP_ERR_PARSE and says where: a syntax error or a NUL byte by its line
 * and column, a value by its JSON path ("$.stages[2].queue.capacity"). */
#ifndef KPIPE_CORE_JSON_IMPL_H
#define KPIPE_CORE_JSON_IMPL_H

#include <jansson.h>

#include "core-impl.h"

/* The largest JSON file kp__json_read_file reads. */
#define KP__JSON_MAX_BYTES ((size_t)64 << 20)

/* A JSON reader's error: KP_ERR_PARSE with its detail. */
#define KP__PERR(...) kp__error(KP_ERR_PARSE, __VA_ARGS__)

/* The whole of file `path` into *text (NUL-ended, freed with kp__free) and
 * its length into *size: KP_ERR_IO naming the path and why it cannot be
 * read, or that it is larger than KP__JSON_MAX_BYTES. */
kp_status kp__json_read_file(const char *path, char **text, size_t *size);
/* Parses `size` bytes of `text` into *root (json_decref it), refusing a
 * NUL byte and duplicate keys; errors name the line and column. */
kp_status kp__json_parse(const char *text, size_t size, json_t **root);

/* "an object", "an array", "a string", "an integer", "a number", "a
 * boolean" or "null", for errors. */
const char *kp__json_type(const json_t *v);
/* Refuses a key of object `obj` at `path` that `allowed` (NULL-ended)
 * does not name. */
kp_status kp__json_only_keys(json_t *obj, const char *path, const char *const *allowed);

/* Typed getters: the value `v` at `path` (NULL: missing, refused like a
 * value of another type) into *out, which a refusal leaves as it was. */
/* An integer from lo to hi. */
kp_status kp__json_int(json_t *v, const char *path, int64_t lo, int64_t hi, int64_t *out);
/* A count: an integer from 0 to max, as a size. */
kp_status kp__json_count(json_t *v, const char *path, size_t max, size_t *out);
kp_status kp__json_string(json_t *v, const char *path, const char **out);
kp_status kp__json_bool(json_t *v, const char *path, bool *out);

/* Optional keys of object `obj` at `path`: *out left as it is when `key`
 * is absent, else the value as the getter above takes it, named
 * "PATH.KEY". A string may have to be one of `allowed` (NULL-ended; NULL:
 * any). */
kp_status kp__json_opt_int(json_t *obj, const char *path, const char *key, int64_t lo,
                           int64_t hi, int64_t *out);
kp_status kp__json_opt_bool(json_t *obj, const char *path, const char *key, bool *out);
kp_status kp__json_opt_string(json_t *obj, const char *path, const char *key,
                              const char *const *allowed, const char **out);

#endif
