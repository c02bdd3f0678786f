/* kpipe core: status codes, error detail, logging, allocation hook, version.
 *
 *   kp_device_t dev;
 *   kp_status st = kp_device_open("cuda", &dev);
 *   if (st != KP_OK)
 *       fprintf(stderr, "%s: %s\n", kp_status_str(st), kp_last_error());
 *
 * Every fallible call returns a kp_status; on failure kp_last_error() holds a
 * thread-local sentence that says what failed, where and why.
 */
#ifndef KPIPE_CORE_H
#define KPIPE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KP_VERSION_MAJOR 0
#define KP_VERSION_MINOR 1
#define KP_VERSION_PATCH 0

/* The status table: name, value, text. One place defines codes and strings. */
#define KP_STATUS_MAP(X)                      \
    X(OK, 0, "success")                       \
    X(ERR_INVALID_ARG, 1, "invalid argument") \
    X(ERR_OUT_OF_MEMORY, 2, "out of memory")  \
    X(ERR_NO_DEVICE, 3, "no such device")     \
    X(ERR_UNSUPPORTED, 4, "not supported")    \
    X(ERR_DEVICE, 5, "device error")          \
    X(ERR_STATE, 6, "call out of order")      \
    X(ERR_PARSE, 7, "parse error")            \
    X(ERR_NOT_FOUND, 8, "not found")          \
    X(ERR_MISMATCH, 9, "mismatch")            \
    X(ERR_IO, 10, "input/output error")       \
    X(ERR_INTERNAL, 11, "internal error")

typedef enum kp_status {
#define KP__STATUS_ENUM(name, value, text) KP_##name = value,
    KP_STATUS_MAP(KP__STATUS_ENUM)
#undef KP__STATUS_ENUM
} kp_status;

/* Short constant text of a status ("out of memory"); never NULL. */
const char *kp_status_str(kp_status st);
/* Name of a status as written in code ("KP_ERR_OUT_OF_MEMORY"); never NULL. */
const char *kp_status_name(kp_status st);
/* Detail of the last failure on this thread; "" when none. Valid until the
 * next kpipe call on this thread. */
const char *kp_last_error(void);
/* Forgets the last failure's detail on this thread. */
void kp_clear_error(void);
/* Records the detail of a failure (printf format) and returns `st`: for
 * modules and backends written outside the library, whose errors then
 * read like the library's own. */
kp_status kp_set_error(kp_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* --- logging ------------------------------------------------------------- */
typedef enum kp_log_level {
    KP_LOG_DEBUG = 0,
    KP_LOG_INFO = 1,
    KP_LOG_WARN = 2,
    KP_LOG_ERROR = 3,
    KP_LOG_OFF = 4,
} kp_log_level;

/* Receives one formatted message (no trailing newline). */
typedef void (*kp_log_fn)(kp_log_level level, const char *msg, void *user);

/* Replaces the log sink; fn == NULL restores the default (stderr). Messages
 * below `level` are dropped before formatting. The default level is WARN,
 * or the value of KP_LOG_LEVEL (debug, info, warn, error, off) read once. */
void kp_log_set_callback(kp_log_fn fn, void *user, kp_log_level level);
/* Current threshold. */
kp_log_level kp_log_get_level(void);
/* Name of a level ("warn"). */
const char *kp_log_level_str(kp_log_level level);

/* --- allocation hook --------------------------------------------------------- */
/* Kinds of memory the library obtains. */
typedef enum kp_mem_kind {
    KP_MEM_HOST = 0,   /* plain host memory: bookkeeping and host buffers */
    KP_MEM_PINNED = 1, /* page-locked host memory */
    KP_MEM_DEVICE = 2, /* device memory */
} kp_mem_kind;

/* Replaceable low-level allocation: every host allocation the library makes
 * (its own bookkeeping, and all memory of the cpu backend) goes through
 * `alloc`/`free`; a driver allocation (cuda device or pinned memory) first asks
 * `permit`. Tests use it to inject failures and to count live allocations. */
typedef struct kp_alloc_hook {
    size_t struct_size; /* sizeof(kp_alloc_hook) */
    /* Returns `bytes` aligned to `align` (a power of two), or NULL to fail. */
    void *(*alloc)(void *user, kp_mem_kind kind, size_t bytes, size_t align);
    /* Releases what alloc returned; never called with NULL. */
    void (*free)(void *user, kp_mem_kind kind, void *ptr);
    /* Optional: returns false to fail a driver allocation of `bytes`. */
    bool (*permit)(void *user, kp_mem_kind kind, size_t bytes);
    void *user;
} kp_alloc_hook;

#define KP_ALLOC_HOOK_INIT \
    { sizeof(kp_alloc_hook), NULL, NULL, NULL, NULL }

/* Installs a hook (NULL restores the default). Not thread-safe: install it
 * before creating objects, and restore it only after every object created
 * under it is destroyed, since memory is freed through the hook that is
 * installed at the time. */
kp_status kp_set_alloc_hook(const kp_alloc_hook *hook);

/* "0.1.0" */
const char *kp_version_str(void);

/* Notes a library in use ("cuBLAS", "13.1.0"), copied; modules note theirs
 * when they register, and kp_library_versions lists them. A name noted
 * again keeps its first version. At most 32. */
kp_status kp_library_register(const char *name, const char *version);
/* The i-th noted library as "name version", or NULL past the end. */
const char *kp_library_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif
