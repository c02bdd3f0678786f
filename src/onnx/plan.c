/* The memory plan: one region for everything a model keeps on the device,
 * laid out once at the maximum shapes.
 *
 *   [ constants read per tick | intermediates and outputs, shared by liveness ]
 *
 * Constants (initializers and folded values a per-tick node reads) come
 * first, each at its own offset. Every other value a per-tick node writes
 * gets an offset among the intermediates: two values may share bytes when
 * their lifetimes -- from the node that writes them to the last node that
 * reads them, both ends included, so no node's output overlaps its own
 * input -- do not meet. Placement is greedy, largest first, each at the
 * lowest offset clear of every placed value it meets (the usual best
 * choice for inference graphs; see docs/models.md). A view (Reshape and its
 * kin) owns no bytes: its readers keep its root alive. */
#include <stdlib.h>
#include <string.h>

#include "onnx-impl.h"

#define KP__OX_ALIGN 256

static size_t kp__ox_align(size_t n) { return (n + KP__OX_ALIGN - 1) & ~(size_t)(KP__OX_ALIGN - 1); }

/* The value whose bytes v's are: v itself unless a view produced it. */
int kp__ox_root(const kp__ox_graph *g, int v) {
    for (;;) {
        const kp__ox_value *val = &g->values[v];
        if (val->producer < 0) return v;
        const kp__ox_gnode *n = &g->nodes[val->producer];
        if (n->folded || !n->op->view || n->in[0] < 0) return v;
        v = n->in[0];
    }
}

/* Which values per-tick nodes read on the device, and each value's last
 * reader (through views, onto their roots). */
static void kp__ox_uses(kp__ox_graph *g) {
    for (size_t v = 0; v < g->n_values; v++) {
        g->values[v].device_use = false;
        g->values[v].last_use = -1;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        if (n->folded) continue;
        for (size_t k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0 || (n->op->host_input && n->op->host_input((int)k))) continue;
            int r = kp__ox_root(g, n->in[k]);
            g->values[n->in[k]].device_use = true;
            g->values[r].device_use = true;
            if (g->values[r].last_use < (int)i) g->values[r].last_use = (int)i;
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        int r = kp__ox_root(g, g->outputs[o]);
        g->values[r].device_use = true;
        g->values[r].last_use = (int)g->n_nodes;
    }
}

typedef struct kp__ox_slot {
    int v;
    size_t bytes;
    int first, last;
} kp__ox_slot;

static int kp__ox_slot_cmp(const void *a, const void *b) {
    const kp__ox_slot *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->v - y->v;
}

/* The lowest offset for s clear of every placed slot whose lifetime meets s's. */
static size_t kp__ox_place(const kp__ox_graph *g, const kp__ox_slot *placed, size_t n_placed,
                           const kp__ox_slot *s) {
    size_t off = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (size_t j = 0; j < n_placed; j++) {
            const kp__ox_slot *p = &placed[j];
            if (p->last < s->first || s->last < p->first) continue;
            size_t po = g->values[p->v].offset;
            if (off < po + p->bytes && po < off + s->bytes) {
                off = kp__ox_align(po + p->bytes);
                moved = true;
            }
        }
    }
    return off;
}

kp_status kp__ox_plan(kp__ox_graph *g, size_t *const_bytes, size_t *total_bytes) {
    kp__ox_uses(g);
    size_t off = 0, n_slots = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        kp__ox_value *val = &g->values[v];
        val->planned = false;
        val->max_bytes = kp__ox_align(kp__ox_value_bytes(val));
        if (!val->device_use || !val->is_const || kp__ox_root(g, (int)v) != (int)v) continue;
        val->offset = off;
        val->planned = true;
        off += val->max_bytes ? val->max_bytes : KP__OX_ALIGN;
    }
    *const_bytes = off;
    kp__ox_slot *slots = kp__calloc(g->n_values + 1, sizeof *slots);
    if (!slots) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the plan");
    for (size_t v = 0; v < g->n_values; v++) {
        kp__ox_value *val = &g->values[v];
        if (val->is_const || val->kind != KP__OX_V_INNER || kp__ox_root(g, (int)v) != (int)v)
            continue;
        if (val->producer < 0) continue; /* swallowed by a fused node (fuse.c) */
        if (!val->device_use && val->last_use < 0) val->last_use = val->producer;
        slots[n_slots++] = (kp__ox_slot){.v = (int)v, .bytes = val->max_bytes ? val->max_bytes : 1,
                                         .first = val->producer, .last = val->last_use};
    }
    qsort(slots, n_slots, sizeof *slots, kp__ox_slot_cmp);
    size_t peak = 0;
    for (size_t i = 0; i < n_slots; i++) {
        kp__ox_value *val = &g->values[slots[i].v];
        val->offset = off + kp__ox_place(g, slots, i, &slots[i]);
        val->planned = true;
        if (val->offset + slots[i].bytes > peak) peak = val->offset + slots[i].bytes;
        /* kp__ox_place reads offsets relative to the intermediates' start */
        val->offset -= off;
    }
    for (size_t i = 0; i < n_slots; i++) g->values[slots[i].v].offset += off;
    kp__free(slots);
    *total_bytes = kp__ox_align(peak > off ? peak : off);
    return KP_OK;
}
