/* Tasks' region index. Each buffer keeps its live accesses (task, region,
 * read or write) in a B+ tree of fanout KP__BT_FAN keyed by the start of
 * their byte extent (ties by access number). Each entry of an inner node
 * holds a lower bound of its child's keys and the largest extent end in
 * the child, so a new region [lo, hi) visits only the children that start
 * before hi and reach past lo: a handful of nodes, each a few cache lines
 * read in order, where a binary tree of a million regions took forty
 * scattered ones. Nodes split when full; a node left empty by an erase
 * leaves its parent and a root with one child gives way to it, so the
 * depth stays the logarithm of the most regions the buffer held.
 * A leaf keeps each access's task and flags beside its key, so the hazard
 * walk over dense regions reads only the nodes on its path: at a million
 * regions, the access's pool entry had been one more miss per submit.
 * Nodes come in slabs from the library's allocator, reused through a free
 * list, and all go back at once when the set runs.
 * A slab is 2 MiB on a 2 MiB boundary. From the second on (past some 70,000
 * regions), each is made one huge page: a walk's reads at a million
 * regions are spread over 30 MB of nodes, and on 4 KiB pages each may
 * also need a page walk of its own (bench_tasks scaling cpu, a million
 * regions, 2-core development machine: 0.45-0.52 us per submit against
 * 0.51-0.72 on small pages, alternated). The first slab gets no advice,
 * so (where huge pages come only on advice) a small set touches a few
 * small pages and does not clear 2 MiB at its first submit. Advice alone
 * was not enough: at a million regions it gave 6 MiB of huge pages of the
 * 30 MB (AnonHugePages), most likely because the C library handed back
 * heap memory already on small pages, which the kernel merges only later,
 * in the background; MADV_COLLAPSE (Linux 6.1) merges it now, once per
 * slab, and gave 32 MiB. Both are only advice: where the kernel keeps huge
 * pages off, refuses the collapse, or an allocation hook gives other
 * memory, nothing else changes. A slab's node count is not a power of
 * two; the walk's division by it is a constant's, a multiply. */
#define _DEFAULT_SOURCE /* madvise() */
#include <string.h>
#include <sys/mman.h>

#include "tasks-impl.h"

#if defined(MADV_HUGEPAGE) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25 /* Linux's value; a kernel before 6.1 refuses it */
#endif
#define KP__BT_SLAB_BYTES (2u << 20)
#define KP__BT_SLAB (KP__BT_SLAB_BYTES / sizeof(kp__bnode)) /* nodes a slab */

static kp__bnode *kp__bn(kp_tasks_t t, uint32_t i) {
    return &t->bt_slabs[i / KP__BT_SLAB][i % KP__BT_SLAB];
}

kp_status kp__tasks_index_reserve(kp_tasks_t t, size_t inserts) {
    /* an insertion makes a node at each level it splits, and a new root */
    size_t want = t->n_bt + inserts * (t->bt_depth + inserts + 2) + 1;
    if (want > UINT32_MAX) return kp__error(KP_ERR_UNSUPPORTED, "tasks: the region index is full");
    while (t->n_bt_slabs * KP__BT_SLAB < want) {
        if (!KP__GROW(t, bt_slabs, 1))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for the region index");
        kp__bnode *s = kp__aligned_alloc(KP_MEM_HOST, KP__BT_SLAB_BYTES, KP__BT_SLAB_BYTES);
        if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for the region index");
#ifdef MADV_HUGEPAGE
        if (t->n_bt_slabs && madvise(s, KP__BT_SLAB_BYTES, MADV_HUGEPAGE) == 0)
            (void)madvise(s, KP__BT_SLAB_BYTES, MADV_COLLAPSE);
#endif
        t->bt_slabs[t->n_bt_slabs++] = s;
    }
    if (!t->n_bt) t->n_bt = 1; /* node 0 means none */
    return KP_OK;
}

void kp__tasks_index_free(kp_tasks_t t) {
    for (size_t i = 0; i < t->n_bt_slabs; i++) kp__aligned_free(KP_MEM_HOST, t->bt_slabs[i]);
    kp__free(t->bt_slabs);
    t->bt_slabs = NULL;
    t->n_bt_slabs = t->cap_bt_slabs = 0;
}

static uint32_t kp__bn_new(kp_tasks_t t, bool leaf) {
    uint32_t i = t->bt_free;
    if (i)
        t->bt_free = kp__bn(t, i)->ref[0];
    else
        i = t->n_bt++; /* reserved by kp__tasks_index_reserve */
    kp__bnode *x = kp__bn(t, i);
    x->n = 0;
    x->leaf = leaf;
    return i;
}

static void kp__bn_free(kp_tasks_t t, uint32_t i) {
    kp__bn(t, i)->ref[0] = t->bt_free;
    t->bt_free = i;
}

static int64_t kp__bn_max_hi(const kp__bnode *x) {
    int64_t m = INT64_MIN;
    for (unsigned i = 0; i < x->n; i++) m = x->hi[i] > m ? x->hi[i] : m;
    return m;
}

/* Whether key (lo, id) comes before entry i of x. */
static bool kp__key_before(const kp__bnode *x, unsigned i, int64_t lo, uint32_t id) {
    return lo < x->lo[i] || (lo == x->lo[i] && id < x->id[i]);
}

/* The child of inner node x that key (lo, id) goes to: the last whose
 * bound is not above it, or the first. */
static unsigned kp__route(const kp__bnode *x, int64_t lo, uint32_t id) {
    unsigned c = 0;
    while (c + 1 < x->n && !kp__key_before(x, c + 1, lo, id)) c++;
    return c;
}

/* Puts an entry at `at`: ref is the child, or in a leaf the task. */
static void kp__bn_put(kp__bnode *x, unsigned at, int64_t lo, int64_t hi, uint32_t id, uint32_t ref,
                       unsigned flags) {
    unsigned m = x->n - at;
    memmove(&x->lo[at + 1], &x->lo[at], m * sizeof x->lo[0]);
    memmove(&x->hi[at + 1], &x->hi[at], m * sizeof x->hi[0]);
    memmove(&x->id[at + 1], &x->id[at], m * sizeof x->id[0]);
    memmove(&x->ref[at + 1], &x->ref[at], m * sizeof x->ref[0]);
    memmove(&x->flags[at + 1], &x->flags[at], m * sizeof x->flags[0]);
    x->lo[at] = lo, x->hi[at] = hi, x->id[at] = id, x->ref[at] = ref;
    x->flags[at] = (uint8_t)flags;
    x->n++;
}

static void kp__bn_cut(kp__bnode *x, unsigned at) {
    unsigned m = x->n - at - 1;
    memmove(&x->lo[at], &x->lo[at + 1], m * sizeof x->lo[0]);
    memmove(&x->hi[at], &x->hi[at + 1], m * sizeof x->hi[0]);
    memmove(&x->id[at], &x->id[at + 1], m * sizeof x->id[0]);
    memmove(&x->ref[at], &x->ref[at + 1], m * sizeof x->ref[0]);
    memmove(&x->flags[at], &x->flags[at + 1], m * sizeof x->flags[0]);
    x->n--;
}

/* Splits the full child c of inner node x (which has room) in two,
 * for key (lo, id). In halves, except where the key goes past the end of
 * x's last child: regions added in order then leave full nodes behind,
 * not half-full ones (a shallower tree, fewer lines to read). */
static void kp__bn_split(kp_tasks_t t, uint32_t xi, unsigned c, int64_t lo, uint32_t id) {
    uint32_t yi = kp__bn(t, xi)->ref[c];
    uint32_t zi = kp__bn_new(t, kp__bn(t, yi)->leaf);
    kp__bnode *x = kp__bn(t, xi), *y = kp__bn(t, yi), *z = kp__bn(t, zi);
    const unsigned h = c + 1 == x->n && !kp__key_before(y, KP__BT_FAN - 1, lo, id) ? KP__BT_FAN - 1
                                                                                   : KP__BT_FAN / 2;
    const unsigned m = KP__BT_FAN - h;
    memcpy(z->lo, &y->lo[h], m * sizeof z->lo[0]);
    memcpy(z->hi, &y->hi[h], m * sizeof z->hi[0]);
    memcpy(z->id, &y->id[h], m * sizeof z->id[0]);
    memcpy(z->ref, &y->ref[h], m * sizeof z->ref[0]);
    memcpy(z->flags, &y->flags[h], m * sizeof z->flags[0]);
    z->n = m;
    y->n = h;
    x->hi[c] = kp__bn_max_hi(y);
    kp__bn_put(x, c + 1, z->lo[0], kp__bn_max_hi(z), z->id[0], zi, 0);
}

void kp__tasks_index_insert(kp_tasks_t t, kp__tbuf *b, uint32_t a, uint32_t task, unsigned flags) {
    const int64_t lo = KP__N(a).lo, hi = KP__N(a).hi;
    if (!b->root) {
        b->root = kp__bn_new(t, true);
        b->depth = 1;
    }
    if (kp__bn(t, b->root)->n == KP__BT_FAN) { /* a new root above the full one */
        uint32_t r = kp__bn_new(t, false);
        kp__bnode *old = kp__bn(t, b->root);
        kp__bn_put(kp__bn(t, r), 0, old->lo[0], kp__bn_max_hi(old), old->id[0], b->root, 0);
        b->root = r;
        kp__bn_split(t, r, 0, lo, a);
        if (++b->depth > t->bt_depth) t->bt_depth = b->depth;
    }
    uint32_t xi = b->root;
    for (;;) { /* x has room: full children split before the walk enters them */
        kp__bnode *x = kp__bn(t, xi);
        if (x->leaf) {
            unsigned at = 0;
            while (at < x->n && !kp__key_before(x, at, lo, a)) at++;
            kp__bn_put(x, at, lo, hi, a, task, flags);
            break;
        }
        unsigned c = kp__route(x, lo, a);
        if (kp__bn(t, x->ref[c])->n == KP__BT_FAN) {
            kp__bn_split(t, xi, c, lo, a);
            x = kp__bn(t, xi);
            if (!kp__key_before(x, c + 1, lo, a)) c++;
        }
        if (kp__key_before(x, c, lo, a)) x->lo[c] = lo, x->id[c] = a; /* a new least key */
        if (hi > x->hi[c]) x->hi[c] = hi;
        xi = x->ref[c];
    }
    b->n_acc++;
}

/* Erases key (lo, a) under x; whether x is left empty. */
static bool kp__bn_erase(kp_tasks_t t, uint32_t xi, int64_t lo, uint32_t a) {
    kp__bnode *x = kp__bn(t, xi);
    if (x->leaf) {
        for (unsigned i = 0; i < x->n; i++)
            if (x->id[i] == a) {
                kp__bn_cut(x, i);
                break;
            }
        return x->n == 0;
    }
    unsigned c = kp__route(x, lo, a);
    if (kp__bn_erase(t, x->ref[c], lo, a)) {
        kp__bn_free(t, x->ref[c]);
        kp__bn_cut(x, c);
    } else {
        x->hi[c] = kp__bn_max_hi(kp__bn(t, x->ref[c]));
    }
    return x->n == 0;
}

void kp__tasks_index_erase(kp_tasks_t t, kp__tbuf *b, uint32_t a) {
    if (kp__bn_erase(t, b->root, KP__N(a).lo, a)) {
        kp__bn_free(t, b->root);
        b->root = 0;
        b->depth = 0;
    }
    while (b->root && !kp__bn(t, b->root)->leaf && kp__bn(t, b->root)->n == 1) {
        uint32_t only = kp__bn(t, b->root)->ref[0];
        kp__bn_free(t, b->root);
        b->root = only;
        b->depth--;
    }
    b->n_acc--;
    KP__N(a).next_free = t->pool_free;
    t->pool_free = a;
}

uint32_t kp__tasks_node_new(kp_tasks_t t) {
    uint32_t n = t->pool_free;
    if (n)
        t->pool_free = KP__N(n).next_free;
    else
        n = (uint32_t)t->n_pool++;
    memset(&KP__N(n), 0, sizeof KP__N(n));
    return n;
}

static bool kp__bn_visit(kp_tasks_t t, uint32_t xi, int64_t lo, int64_t hi,
                         kp__index_visit_fn visit, void *ctx) {
    kp__bnode *x = kp__bn(t, xi);
    /* every line of the node at once: the scan below reads from most of
     * them, and at a million regions each is a miss of its own */
    for (size_t off = 64; off < sizeof *x; off += 64) __builtin_prefetch((char *)x + off);
    for (unsigned i = 0; i < x->n && x->lo[i] < hi; i++) {
        if (x->hi[i] <= lo) continue;
        if (!(x->leaf ? visit(t, x, i, ctx) : kp__bn_visit(t, x->ref[i], lo, hi, visit, ctx)))
            return false;
    }
    return true;
}

bool kp__tasks_index_visit(kp_tasks_t t, const kp__tbuf *b, int64_t lo, int64_t hi,
                           kp__index_visit_fn visit, void *ctx) {
    return !b->root || kp__bn_visit(t, b->root, lo, hi, visit, ctx);
}
