/* Tasks' region index. Each buffer keeps its live accesses (task, region,
 * read or write) in an interval treap: a tree ordered by the start of their
 * byte extent, each node holding the largest end in its subtree, balanced
 * by random priorities. A new region visits only the subtrees whose extents
 * can reach it (O(log n) plus the overlapping ones). Insertion and removal
 * cost O(log n); nodes come from the set's pool. */
#include <stdlib.h>
#include <string.h>

#include "tasks-impl.h"

static int64_t kp__max_hi(const kp_tasks_t t, uint32_t i) {
    return i ? KP__N(i).max_hi : INT64_MIN;
}

static void kp__fix(kp_tasks_t t, uint32_t i) {
    int64_t m = KP__N(i).hi, l = kp__max_hi(t, KP__N(i).left), r = kp__max_hi(t, KP__N(i).right);
    KP__N(i).max_hi = m > l ? (m > r ? m : r) : (l > r ? l : r);
}

/* Key order: by lo, then by pool index. */
static bool kp__before(const kp_tasks_t t, uint32_t i, int64_t lo, uint32_t j) {
    return KP__N(i).lo < lo || (KP__N(i).lo == lo && i < j);
}

/* Splits subtree n into the keys before (lo, j) and the rest. */
static void kp__split(kp_tasks_t t, uint32_t n, int64_t lo, uint32_t j, uint32_t *l, uint32_t *r) {
    if (!n) {
        *l = *r = 0;
        return;
    }
    if (kp__before(t, n, lo, j)) {
        kp__split(t, KP__N(n).right, lo, j, &KP__N(n).right, r);
        *l = n;
    } else {
        kp__split(t, KP__N(n).left, lo, j, l, &KP__N(n).left);
        *r = n;
    }
    kp__fix(t, n);
}

static uint32_t kp__merge(kp_tasks_t t, uint32_t l, uint32_t r) {
    if (!l || !r) return l ? l : r;
    if (KP__N(l).prio > KP__N(r).prio) {
        KP__N(l).right = kp__merge(t, KP__N(l).right, r);
        kp__fix(t, l);
        return l;
    }
    KP__N(r).left = kp__merge(t, l, KP__N(r).left);
    kp__fix(t, r);
    return r;
}

void kp__tasks_treap_insert(kp_tasks_t t, kp__tbuf *b, uint32_t n) {
    uint32_t l, r;
    kp__split(t, b->root, KP__N(n).lo, n, &l, &r);
    b->root = kp__merge(t, kp__merge(t, l, n), r);
    b->n_acc++;
}

void kp__tasks_treap_erase(kp_tasks_t t, kp__tbuf *b, uint32_t n) {
    uint32_t l, m, r;
    kp__split(t, b->root, KP__N(n).lo, n, &l, &m);
    kp__split(t, m, KP__N(n).lo, n + 1, &m, &r); /* m is n alone */
    b->root = kp__merge(t, l, r);
    b->n_acc--;
    KP__N(n).left = t->pool_free;
    t->pool_free = n;
}

uint32_t kp__tasks_node_new(kp_tasks_t t) {
    uint32_t n = t->pool_free;
    if (n)
        t->pool_free = KP__N(n).left;
    else
        n = (uint32_t)t->n_pool++;
    t->prio_state ^= t->prio_state << 13; /* xorshift32 */
    t->prio_state ^= t->prio_state >> 17;
    t->prio_state ^= t->prio_state << 5;
    memset(&KP__N(n), 0, sizeof KP__N(n));
    KP__N(n).prio = t->prio_state;
    return n;
}

bool kp__tasks_treap_visit(kp_tasks_t t, uint32_t n, int64_t lo, int64_t hi,
                           bool (*visit)(kp_tasks_t, uint32_t, void *), void *ctx) {
    while (n && KP__N(n).max_hi > lo) {
        if (!kp__tasks_treap_visit(t, KP__N(n).left, lo, hi, visit, ctx)) return false;
        if (KP__N(n).lo >= hi) return true; /* it and its right subtree start too late */
        if (KP__N(n).hi > lo && !visit(t, n, ctx)) return false;
        n = KP__N(n).right;
    }
    return true;
}
