/* Private helpers shared by every layer: error detail, checks, allocation. */
#ifndef KPIPE_CORE_IMPL_H
#define KPIPE_CORE_IMPL_H

#include <stdatomic.h>
#include <time.h>

#include "kpipe/core.h"
#include "kpipe/tensor.h"

#if defined(__GNUC__)
#define KP__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KP__PRINTF(a, b)
#endif

/* Records the detail of a failure and returns `st`, so a caller can write
 * `return kp__error(KP_ERR_INVALID_ARG, "...", ...)`. */
kp_status kp__error(kp_status st, const char *fmt, ...) KP__PRINTF(2, 3);
/* Prepends context to the current detail ("pipeline setup: <detail>"). */
kp_status kp__error_prefix(kp_status st, const char *fmt, ...) KP__PRINTF(2, 3);

/* "fn: the stream belongs to cpu, the pipeline to cuda:0". When the two
 * devices share a name, it says they are two handles opened for it: each
 * kp_device_open makes a new device, and objects of one never mix with
 * another's. Devices are opaque here (core sits below the device layer). */
kp_status kp__error_devices(const char *fn, const char *what, const void *what_dev,
                            const char *what_name, const char *owner, const void *owner_dev,
                            const char *owner_name);

/* Versioned config structs (NCCL's habit): each starts with its
 * struct_size, so a program built against an older, shorter version still
 * works. kp__config_read copies what `src` has -- its struct_size bytes, at
 * least `min_size` (the first version's) and at most `size` (this one's) --
 * over the defaults already in `dst`, then sets dst's struct_size. A size
 * outside that range gets KP_ERR_INVALID_ARG naming `what` and its init macro. */
kp_status kp__config_read(void *dst, size_t size, const void *src, size_t min_size,
                          const char *what, const char *init_macro);
/* The size of `type` up to and including `field`: a version's min_size. */
#define KP__SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* kp_desc_validate without recording an error: for checks in functions that
 * do not return a status. */
bool kp__desc_ok(const kp_tensor_desc *d);

/* Every public function that can fail opens with KP_API_ENTRY(): a detail
 * recorded while it runs, by it or by anything it calls, then starts with
 * its name ("kp_stream_sync: ..."), added on the way out unless it is there
 * already. Nested public calls read as a chain ("kp_tensor_empty:
 * kp_allocator_alloc: ..."). */
typedef struct kp__api_scope {
    const char *fn;
    unsigned gen; /* the thread's error generation at entry */
} kp__api_scope;
kp__api_scope kp__api_enter(const char *fn);
void kp__api_leave(const kp__api_scope *s);
#define KP_API_ENTRY() \
    kp__api_scope kp__api __attribute__((cleanup(kp__api_leave), unused)) = kp__api_enter(__func__)

/* Objects used by one thread at a time (pipelines, graph caches, task sets,
 * resizers): each of their calls that reads or changes state claims the
 * object for its duration with KP_GUARD. A call that overlaps another on
 * the same object -- from a second thread, or from a callback inside the
 * first -- is refused with KP_ERR_STATE naming the call in progress,
 * instead of corrupting the object. Calls in turn from different threads
 * pass, and the claim orders each after the one before. One
 * compare-exchange and one store a call, in every build: cheap enough for
 * the per-tick paths, and a misuse caught in release builds is one that
 * does not go unnoticed in production. */
typedef struct kp__guard {
    _Atomic(const char *) in; /* the public function inside a call, or NULL */
} kp__guard;

/* The refusal: "the <what> is in use: <inside> is running on it ...". */
kp_status kp__guard_refuse(const char *what, const char *inside);

static inline kp_status kp__guard_enter(kp__guard *g, const char *fn, const char *what,
                                        kp__guard **held) {
    const char *idle = NULL;
    if (!g) return KP_OK; /* a NULL object: the call's own checks name it */
    if (atomic_compare_exchange_strong_explicit(&g->in, &idle, fn, memory_order_acquire,
                                                memory_order_relaxed)) {
        *held = g;
        return KP_OK;
    }
    return kp__guard_refuse(what, idle);
}

static inline void kp__guard_leave(kp__guard **held) {
    if (*held) atomic_store_explicit(&(*held)->in, NULL, memory_order_release);
}

/* Claims `g` (a kp__guard *, NULL for a NULL object) until the function
 * returns, or returns KP_ERR_STATE; `what` names the object ("pipeline").
 * Once per function, after KP_API_ENTRY and before any read of the
 * object's state. */
#define KP_GUARD(g, what)                                                               \
    kp__guard *kp__guard_held __attribute__((cleanup(kp__guard_leave), unused)) = NULL; \
    KP_CHECK(kp__guard_enter((g), __func__, (what), &kp__guard_held))

/* "1.50 MiB": a byte count for people, into buf (core/log.c). */
const char *kp__bytes_str(size_t bytes, char *buf, size_t len);

/* Logs at `level` if enabled; never called in a per-tick path. */
void kp__log(kp_log_level level, const char *fmt, ...) KP__PRINTF(2, 3);
#define KP_LOG_ENABLED(lvl) ((lvl) >= kp_log_get_level())

/* Evaluate a kp_status expression; on failure store it in `st` and jump. */
#define KP_CHECK_GOTO(expr, st, label) \
    do {                               \
        (st) = (expr);                 \
        if ((st) != KP_OK) goto label; \
    } while (0)
#define KP_CHECK(expr)                      \
    do {                                    \
        kp_status kp__st = (expr);          \
        if (kp__st != KP_OK) return kp__st; \
    } while (0)
#define KP_ARG_CHECK(cond)                                                                  \
    do {                                                                                    \
        if (!(cond))                                                                        \
            return kp__error(KP_ERR_INVALID_ARG, "%s: argument check failed: %s", __func__, \
                             #cond);                                                        \
    } while (0)

/* The largest single allocation the library asks for (256 TiB): sizes past
 * it are refused before any rounding or driver call, so size arithmetic
 * below this bound cannot wrap. */
#define KP__MAX_ALLOC_BYTES ((size_t)1 << 48)

/* Host allocation through the hook. kp__malloc never returns NULL silently:
 * callers check and report KP_ERR_OUT_OF_MEMORY. */
void *kp__malloc(size_t bytes);
void *kp__calloc(size_t n, size_t size);
void *kp__aligned_alloc(kp_mem_kind kind, size_t bytes, size_t align);
void kp__aligned_free(kp_mem_kind kind, void *ptr);
void kp__free(void *ptr);
bool kp__permit(kp_mem_kind kind, size_t bytes);

/* Broken internal invariant: the only place the library aborts. */
#define KP_ASSERT(cond)                                          \
    do {                                                         \
        if (!(cond)) kp__assert_fail(#cond, __FILE__, __LINE__); \
    } while (0)
_Noreturn void kp__assert_fail(const char *cond, const char *file, int line);

/* CLOCK_MONOTONIC in nanoseconds: the one clock every layer times with. */
static inline uint64_t kp__mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
