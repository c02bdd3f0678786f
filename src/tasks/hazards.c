/* Tasks' dependencies: a submitted task depends on every earlier task
 * whose region shares a byte with its own on the same buffer, unless both
 * only read (the exact overlap test, on the accesses the index finds). A
 * write removes the accesses it covers (all inside its extent when its
 * region is contiguous, else those on exactly its region): any later task
 * that touches their bytes touches the write's and so depends on it, and
 * through it on them; repeated work on the same tiles keeps one entry per
 * tile. Of a new task's predecessors, one that is itself a predecessor of
 * another is implied and dropped. */
#include <stdlib.h>
#include <string.h>

#include "tasks-impl.h"

static bool kp__is_pred(const kp_tasks_t t, uint64_t p, uint64_t of) {
    const kp__task *k = &t->tasks[of];
    for (size_t i = 0; i < k->n_preds; i++)
        if (t->edges[k->first_pred + i].from == p) return true;
    return false;
}

/* Do two regions name the same bytes the same way? */
static bool kp__same_region(const kp_tensor_desc *a, const kp_tensor_desc *b) {
    if (kp_dtype_size(a->dtype) != kp_dtype_size(b->dtype) || a->ndim != b->ndim ||
        a->offset != b->offset)
        return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k] || a->strides[k] != b->strides[k]) return false;
    return true;
}

/* The accesses of other tasks a write covers, into out[]: inside its
 * extent when it is contiguous, else on exactly its region. */
typedef struct kp__cover_ctx {
    int64_t lo, hi;
    uint32_t id;
    const kp_tensor_desc *desc;
    bool contiguous;
    uint32_t *out;
    size_t n;
    uint32_t same; /* the first covered access of exactly this extent; 0: none */
    kp__bnode *same_leaf;
    unsigned same_at; /* its place in same_leaf */
} kp__cover_ctx;

/* Entry i of leaf x, from the leaf alone but for a strided region's
 * descriptor. */
static void kp__cover_test(kp_tasks_t t, kp__bnode *x, unsigned i, kp__cover_ctx *c) {
    const int64_t lo = x->lo[i], hi = x->hi[i];
    /* a dense access is never exactly a strided region */
    if (x->task[i] != c->id &&
        (c->contiguous ? lo >= c->lo && hi <= c->hi
                       : lo == c->lo && !(x->flags[i] & KP__ACC_DENSE) &&
                             kp__same_region(&t->args[KP__N(x->id[i]).arg].v.desc, c->desc))) {
        c->out[c->n++] = x->id[i];
        if (!c->same && lo == c->lo && hi == c->hi)
            c->same = x->id[i], c->same_leaf = x, c->same_at = i;
    }
}

static bool kp__cover_visit(kp_tasks_t t, kp__bnode *x, unsigned i, void *ctx) {
    kp__cover_test(t, x, i, ctx);
    return true;
}

/* The hazards of one new region: candidate predecessors, one per task. */
typedef struct kp__hazard_ctx {
    const kp_task_arg *a;
    uint32_t buffer;
    uint32_t id;
    bool w, r;
    bool dense; /* the new region is contiguous */
    kp_task_edge *cand;
    size_t n_cand, cap;
    bool overflow;
    kp__cover_ctx *cover; /* when set, the same walk finds what the write covers */
} kp__hazard_ctx;

static bool kp__hazard_visit(kp_tasks_t t, kp__bnode *x, unsigned i, void *ctx) {
    kp__hazard_ctx *h = ctx;
    const uint32_t task = x->task[i];
    const bool write = x->flags[i] & KP__ACC_WRITE;
    if (h->cover) kp__cover_test(t, x, i, h->cover);
    if (task == h->id || (!write && !h->w)) return true; /* two reads never conflict */
    t->stats.overlap_tests++;
    /* The walk only comes here for extents that meet: two dense regions
     * then share bytes. A dense access is its byte run: the test reads no
     * descriptor of it (nor its pool entry, a cache miss in a set of a
     * million); a strided one's descriptor is its argument's. */
    if (!((x->flags[i] & KP__ACC_DENSE) && h->dense)) {
        kp_tensor_desc run;
        const kp_tensor_desc *d = &run;
        if (x->flags[i] & KP__ACC_DENSE) {
            int64_t bytes = x->hi[i] - x->lo[i];
            kp_desc_init(&run, KP_U8, 1, &bytes, NULL);
            run.offset = x->lo[i];
        } else {
            d = &t->args[KP__N(x->id[i]).arg].v.desc;
        }
        if (kp_desc_overlap(d, &h->a->desc) == KP_OVERLAP_NONE) return true;
    }
    kp_hazard hz = write && h->r ? KP_HAZARD_RAW : write ? KP_HAZARD_WAW : KP_HAZARD_WAR;
    size_t c = 0;
    while (c < h->n_cand && h->cand[c].from != task) c++;
    if (c < h->n_cand) {
        if (hz == KP_HAZARD_RAW) h->cand[c].hazard = hz, h->cand[c].buffer = h->buffer;
    } else if (h->n_cand == h->cap) {
        h->overflow = true;
        return false;
    } else {
        h->cand[h->n_cand++] =
            (kp_task_edge){.from = task, .to = h->id, .hazard = hz, .buffer = h->buffer};
    }
    return true;
}

/* What one submit works out before it changes the set. */
#define KP__SUBMIT_CAND 1024 /* candidate predecessors of one task */
typedef struct kp__submit {
    uint32_t id;
    /* argument i writes, and no other argument of the task names its
     * buffer: its hazard walk also finds what it covers (cover[i]) */
    bool alone[KP_TASK_MAX_ARGS];
    kp__cover_ctx cover[KP_TASK_MAX_ARGS];
    kp_task_edge cand[KP__SUBMIT_CAND];
    size_t n_cand;
} kp__submit;

/* The kernel's and the arguments' checks; *scalar_bytes, the scalars'. */
static kp_status kp__submit_check(kp_tasks_t t, const kp_task_kernel *kernel,
                                  const kp_task_arg *args, size_t n_args, size_t *scalar_bytes) {
    if (!kernel->fn && !kernel->launch)
        return kp__error(KP_ERR_INVALID_ARG, "kernel %s has neither fn nor launch",
                         kernel->name ? kernel->name : "(unnamed)");
    if (n_args > KP_TASK_MAX_ARGS)
        return kp__error(KP_ERR_INVALID_ARG, "%zu arguments (at most %d)", n_args,
                         KP_TASK_MAX_ARGS);
    if (n_args && !args) return kp__error(KP_ERR_INVALID_ARG, "args is NULL");
    *scalar_bytes = 0;
    for (size_t i = 0; i < n_args; i++) {
        KP_CHECK(kp__tasks_check_arg(t, &args[i], i));
        *scalar_bytes += args[i].access == KP_TASK_SCALAR ? args[i].scalar_bytes : 0;
    }
    return kp__tasks_check_first(t, args, n_args);
}

/* s->alone[], and the room the writes' dropped accesses need: each
 * write's list, then room for one more (a write whose buffer the task
 * names twice looks again later); never empty, so drop + n is always a
 * pointer into it. */
static size_t kp__submit_alone(kp_tasks_t t, const kp_task_arg *args, size_t n_args,
                               kp__submit *s) {
    size_t drop_room = 0, drop_max = 0;
    for (size_t i = 0; i < n_args; i++) {
        const bool writes = args[i].access != KP_TASK_SCALAR && args[i].access != KP_TASK_IN;
        s->alone[i] = writes;
        for (size_t j = 0; j < n_args && s->alone[i]; j++)
            s->alone[i] =
                j == i || args[j].access == KP_TASK_SCALAR || args[j].buffer != args[i].buffer;
        if (writes) {
            size_t na = kp__tasks_buf(t, args[i].buffer)->n_acc;
            drop_room += na;
            drop_max = na > drop_max ? na : drop_max;
        }
    }
    return drop_room + drop_max + 1;
}

/* Room for everything the task adds: past this point nothing fails. */
static kp_status kp__submit_reserve(kp_tasks_t t, const kp_task_arg *args, size_t n_args,
                                    size_t scalar_bytes, kp__submit *s) {
    size_t acc_room = 0;
    for (size_t i = 0; i < n_args; i++) acc_room += args[i].access != KP_TASK_SCALAR;
    bool room = KP__GROW(t, tasks, 1) && KP__GROW(t, args, n_args) &&
                KP__GROW(t, scalars, scalar_bytes + 16 * n_args);
    if (t->n_args + n_args > UINT32_MAX || t->n_pool + acc_room + 1 > UINT32_MAX)
        return kp__error(KP_ERR_UNSUPPORTED, "the set holds 2^32 arguments; run it first");
    if (t->n_tasks >= UINT32_MAX) /* the index keeps task numbers in 32 bits */
        return kp__error(KP_ERR_UNSUPPORTED, "the set holds 2^32 - 1 tasks; run it first");
    if (room && !t->n_pool) t->n_pool = 1; /* node 0 means none */
    room = room && KP__GROW(t, pool, acc_room);
    const size_t drop = kp__submit_alone(t, args, n_args, s);
    t->n_drop = 0;
    room = room && KP__GROW(t, drop, drop);
    if (!room) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for a task");
    return kp__tasks_index_reserve(t, acc_room);
}

/* What a write of [lo, hi) on `desc` covers, found into the drop list. */
static kp__cover_ctx kp__submit_cover(kp_tasks_t t, uint32_t id, const kp_tensor_desc *desc,
                                      int64_t lo, int64_t hi) {
    return (kp__cover_ctx){.lo = lo,
                           .hi = hi,
                           .id = id,
                           .desc = desc,
                           .contiguous = kp_desc_is_contiguous(desc),
                           .out = t->drop + t->n_drop};
}

/* Hazards against the live regions into s->cand; what a write alone on its
 * buffer covers, in the same walk. */
static kp_status kp__submit_hazards(kp_tasks_t t, const kp_task_arg *args, size_t n_args,
                                    kp__submit *s) {
    bool overflow = false;
    for (size_t i = 0; i < n_args; i++) {
        const kp_task_arg *a = &args[i];
        if (a->access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__tasks_buf(t, a->buffer);
        int64_t lo, hi;
        kp_desc_byte_extent(&a->desc, &lo, &hi);
        if (lo == hi) continue; /* an empty region touches nothing */
        kp__hazard_ctx h = {.a = a,
                            .buffer = a->buffer,
                            .id = s->id,
                            .w = a->access != KP_TASK_IN,
                            .r = a->access != KP_TASK_OUT,
                            .dense = kp_desc_is_contiguous(&a->desc),
                            .cand = s->cand,
                            .n_cand = s->n_cand,
                            .cap = KP__SUBMIT_CAND};
        if (s->alone[i]) {
            s->cover[i] = kp__submit_cover(t, s->id, &a->desc, lo, hi);
            h.cover = &s->cover[i];
        }
        kp__tasks_index_visit(t, b, lo, hi, kp__hazard_visit, &h);
        if (s->alone[i]) t->n_drop += s->cover[i].n;
        s->n_cand = h.n_cand;
        overflow |= h.overflow;
    }
    if (overflow)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "task %llu depends on more than %d earlier tasks directly; run the set "
                         "before submitting more",
                         (unsigned long long)s->id, KP__SUBMIT_CAND);
    return KP_OK;
}

/* Keeps the predecessors no other predecessor implies. */
static void kp__submit_preds(kp_tasks_t t, kp__task *task, const kp__submit *s) {
    const kp_task_edge *cand = s->cand;
    t->stats.edges_found += s->n_cand;
    for (size_t c = 0; c < s->n_cand; c++) {
        bool implied = false;
        for (size_t d = 0; d < s->n_cand && !implied; d++)
            implied =
                d != c && cand[d].from > cand[c].from && kp__is_pred(t, cand[c].from, cand[d].from);
        if (implied) continue;
        t->edges[t->n_edges++] = cand[c];
        task->n_preds++;
    }
    t->stats.edges += task->n_preds;
}

/* The new access [lo, hi) of task `id` in b's index, in place of what its
 * write covers (c). */
static void kp__submit_index(kp_tasks_t t, kp__tbuf *b, const kp__cover_ctx *c, int64_t lo,
                             int64_t hi, unsigned flags, uint32_t id) {
    if (c->same) { /* same key and end: the entry is retagged in place, the tree keeps its
                    * shape; a dense access's pool entry goes unread, left as it is */
        c->same_leaf->task[c->same_at] = id;
        c->same_leaf->flags[c->same_at] = (uint8_t)flags;
        if (!(flags & KP__ACC_DENSE)) KP__N(c->same).arg = (uint32_t)(t->n_args - 1);
    }
    for (size_t k = 0; k < c->n; k++) /* after the retag: erasing moves leaf entries */
        if (c->out[k] != c->same) kp__tasks_index_erase(t, b, c->out[k]);
    if (!c->same) {
        uint32_t nd = kp__tasks_node_new(t);
        KP__N(nd) = (kp__access){.lo = lo, .hi = hi, .arg = (uint32_t)(t->n_args - 1)};
        kp__tasks_index_insert(t, b, nd, id, flags);
    }
}

/* Argument i recorded, and the index updated: a write covers what it
 * contains. */
static void kp__submit_arg(kp_tasks_t t, const kp_task_arg *a, size_t i, const kp__submit *s) {
    kp__targ *g = &t->args[t->n_args++];
    memset(g, 0, sizeof *g);
    g->v.access = a->access;
    if (a->access == KP_TASK_SCALAR) {
        g->scalar_off = t->n_scalars;
        memcpy(t->scalars + t->n_scalars, a->scalar, a->scalar_bytes);
        t->n_scalars += (a->scalar_bytes + 15) & ~(size_t)15;
        g->v.scalar_bytes = a->scalar_bytes;
        return;
    }
    kp__tbuf *b = kp__tasks_buf(t, a->buffer);
    g->buffer = a->buffer;
    g->v.desc = a->desc;
    bool w = a->access != KP_TASK_IN;
    if (w) b->version++;
    g->version = b->version;
    int64_t lo, hi;
    kp_desc_byte_extent(&a->desc, &lo, &hi);
    if (lo == hi) return;
    const unsigned flags =
        (w ? KP__ACC_WRITE : 0u) | (kp_desc_is_contiguous(&a->desc) ? KP__ACC_DENSE : 0u);
    kp__cover_ctx c = {0};
    if (w && s->alone[i]) { /* drop what this write covers */
        c = s->cover[i];
    } else if (w) { /* the task wrote this buffer already: look again */
        c = kp__submit_cover(t, s->id, &a->desc, lo, hi);
        kp__tasks_index_visit(t, b, lo, hi, kp__cover_visit, &c);
    }
    kp__submit_index(t, b, &c, lo, hi, flags, s->id);
}

kp_status kp_tasks_submit(kp_tasks_t t, const kp_task_kernel *kernel, const kp_task_arg *args,
                          size_t n_args, uint64_t *task_id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(kernel);
    size_t scalar_bytes = 0;
    KP_CHECK(kp__submit_check(t, kernel, args, n_args, &scalar_bytes));
    kp__submit s;
    s.n_cand = 0;
    KP_CHECK(kp__submit_reserve(t, args, n_args, scalar_bytes, &s));
    s.id = (uint32_t)t->n_tasks;
    KP_CHECK(kp__submit_hazards(t, args, n_args, &s));
    if (!KP__GROW(t, edges, s.n_cand))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for edges");
    KP_CHECK(kp__tasks_allocate_first(t, args, n_args));
    kp__task *task = &t->tasks[t->n_tasks++];
    *task = (kp__task){.k = *kernel,
                       .first_arg = t->n_args,
                       .n_args = n_args,
                       .first_pred = t->n_edges,
                       .stream = -1};
    kp__submit_preds(t, task, &s);
    for (size_t i = 0; i < n_args; i++) kp__submit_arg(t, &args[i], i, &s);
    t->stats.tasks = t->n_tasks;
    if (task_id) *task_id = s.id;
    return KP_OK;
}
