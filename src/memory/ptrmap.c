/* A pointer-keyed hash map for live blocks (O(1) free and double-free
 * checks). */
#include <string.h>

#include "memory-impl.h"

#define KP__EMPTY 0u
#define KP__TOMB 1u

static size_t kp__hash(uintptr_t k, size_t cap) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

void kp__ptrmap_free(kp__ptrmap *m) {
    kp__free(m->keys);
    kp__free(m->vals);
    memset(m, 0, sizeof *m);
}

static kp_status kp__ptrmap_grow(kp__ptrmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    if (m->used * 2 < m->cap) cap = m->cap; /* only tombstones to sweep */
    uintptr_t *keys = kp__calloc(cap, sizeof *keys);
    void **vals = kp__calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        kp__free(keys);
        kp__free(vals);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "allocator: no memory to track %zu blocks",
                         m->used + 1);
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] <= KP__TOMB) continue;
        size_t j = kp__hash(m->keys[i], cap);
        while (keys[j] != KP__EMPTY) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    kp__free(m->keys);
    kp__free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    m->tomb = 0;
    return KP_OK;
}

kp_status kp__ptrmap_put(kp__ptrmap *m, const void *key, void *val) {
    KP_ASSERT((uintptr_t)key > KP__TOMB); /* allocators never hand out 0 or 1 */
    if ((m->used + m->tomb + 1) * 4 > m->cap * 3) KP_CHECK(kp__ptrmap_grow(m));
    uintptr_t k = (uintptr_t)key;
    size_t j = kp__hash(k, m->cap);
    while (m->keys[j] > KP__TOMB && m->keys[j] != k) j = (j + 1) & (m->cap - 1);
    if (m->keys[j] == KP__TOMB) m->tomb--;
    if (m->keys[j] != k) m->used++;
    m->keys[j] = k;
    m->vals[j] = val;
    return KP_OK;
}

/* Keys 0 and 1 mark empty and deleted slots, so they are never found: a
 * caller's (void *)1 must not match a tombstone. */
static size_t kp__ptrmap_find(const kp__ptrmap *m, uintptr_t k) {
    if (!m->cap || k <= KP__TOMB) return SIZE_MAX;
    for (size_t j = kp__hash(k, m->cap);; j = (j + 1) & (m->cap - 1)) {
        if (m->keys[j] == KP__EMPTY) return SIZE_MAX;
        if (m->keys[j] == k) return j;
    }
}

void *kp__ptrmap_get(const kp__ptrmap *m, const void *key) {
    size_t j = kp__ptrmap_find(m, (uintptr_t)key);
    return j == SIZE_MAX ? NULL : m->vals[j];
}

void *kp__ptrmap_take(kp__ptrmap *m, const void *key) {
    size_t j = kp__ptrmap_find(m, (uintptr_t)key);
    if (j == SIZE_MAX) return NULL;
    m->keys[j] = KP__TOMB;
    m->used--;
    m->tomb++;
    return m->vals[j];
}
