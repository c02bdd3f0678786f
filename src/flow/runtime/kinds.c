/* The kinds of stage by which the flow sees its built-in sources and
 * sinks (flow-impl.h), and the names of routes. Calls nothing of the
 * flow's: the runtime's files and the flow layers above (the stages, the
 * remote ends) call it. */
#include <pthread.h>
#include <stdatomic.h>

#include "flow-impl.h"

#define KP__MAX_KINDS 16
static kp__stage_kind kp__kinds[KP__MAX_KINDS];
static _Atomic size_t kp__n_kinds; /* entries below it are complete and never change */
static pthread_mutex_t kp__kinds_mu = PTHREAD_MUTEX_INITIALIZER;

kp_status kp__stage_kind_add(const kp__stage_kind *kind) {
    kp_status st = KP_OK;
    pthread_mutex_lock(&kp__kinds_mu);
    size_t n = atomic_load(&kp__n_kinds);
    bool known = false;
    for (size_t i = 0; i < n && !known; i++) known = kp__kinds[i].fn == kind->fn;
    if (!known && n == KP__MAX_KINDS)
        st = kp__error(KP_ERR_INTERNAL, "flow: more than %d kinds of stage", KP__MAX_KINDS);
    else if (!known) {
        kp__kinds[n] = *kind;
        atomic_store(&kp__n_kinds, n + 1);
    }
    pthread_mutex_unlock(&kp__kinds_mu);
    return st;
}

const kp__stage_kind *kp__stage_kind_find(kp_flow_stage_fn fn) {
    size_t n = atomic_load(&kp__n_kinds);
    for (size_t i = 0; fn && i < n; i++)
        if (kp__kinds[i].fn == fn) return &kp__kinds[i];
    return NULL;
}

const char *kp_route_str(kp_route r) {
    switch (r) {
    case KP_ROUTE_STREAM: return "stream";
    case KP_ROUTE_USER0: return "user0";
    case KP_ROUTE_COPY: return "copy";
    }
    return "invalid";
}
