/* Host allocation through the replaceable hook. */
#include <stdlib.h>
#include <string.h>

#include "core-impl.h"

static void *kp__default_alloc(void *user, kp_mem_kind kind, size_t bytes, size_t align) {
    void *p = NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    if (bytes == 0) bytes = 1;
    return posix_memalign(&p, align, bytes) == 0 ? p : NULL;
}

static void kp__default_free(void *user, kp_mem_kind kind, void *ptr) { free(ptr); }

static kp_alloc_hook kp__hook = {
    .struct_size = sizeof(kp_alloc_hook), .alloc = kp__default_alloc, .free = kp__default_free};

kp_status kp_set_alloc_hook(const kp_alloc_hook *hook) {
    KP_API_ENTRY();
    if (!hook) {
        kp__hook = (kp_alloc_hook){.struct_size = sizeof(kp_alloc_hook),
                                   .alloc = kp__default_alloc,
                                   .free = kp__default_free};
        return KP_OK;
    }
    kp_alloc_hook h = KP_ALLOC_HOOK_INIT;
    KP_CHECK(kp__config_read(&h, sizeof h, hook, KP__SIZE_THROUGH(kp_alloc_hook, user), "hook",
                             "KP_ALLOC_HOOK_INIT"));
    if ((h.alloc == NULL) != (h.free == NULL))
        return kp__error(KP_ERR_INVALID_ARG, "alloc and free must be given together");
    kp__hook = h;
    if (!kp__hook.alloc) {
        kp__hook.alloc = kp__default_alloc;
        kp__hook.free = kp__default_free;
    }
    return KP_OK;
}

void *kp__aligned_alloc(kp_mem_kind kind, size_t bytes, size_t align) {
    return kp__hook.alloc(kp__hook.user, kind, bytes, align);
}

void kp__aligned_free(kp_mem_kind kind, void *ptr) {
    if (ptr) kp__hook.free(kp__hook.user, kind, ptr);
}

bool kp__permit(kp_mem_kind kind, size_t bytes) {
    return !kp__hook.permit || kp__hook.permit(kp__hook.user, kind, bytes);
}

void *kp__malloc(size_t bytes) { return kp__aligned_alloc(KP_MEM_HOST, bytes, 16); }

void *kp__calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = kp__malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void kp__free(void *ptr) { kp__aligned_free(KP_MEM_HOST, ptr); }
