/* Flows' waiting without sleeping: a stage spins a while on a queue or the
 * free list before it sleeps, and tries a lock a while before it blocks on
 * it, so that a hand-over arriving soon costs no thread wake-up. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "runtime-impl.h"

static void kp__pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* One wait of a spin. Where the flow's threads outnumber the cores, a
 * spinning thread would burn the very core that the thread it waits for
 * needs (on 2 cores, 4 stages spinning for 1 ms each made a frame cost
 * 50 times more): there it yields the core instead of pausing on it. */
static void kp__spin_once(const struct kp_flow *f) {
    if (f->spin_yield)
        sched_yield();
    else
        kp__pause();
}

void kp__flow_spin_while(struct kp_flow *f, _Atomic size_t *v, size_t blocked) {
    if (!f->spin_us) return;
    double until = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_relaxed) != blocked) return;
        if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return;
        if (i % 64 == 0 || f->spin_yield) {
            double now = kp__now_us();
            if (!until) until = now + f->spin_us;
            if (now >= until) return;
        }
        kp__spin_once(f);
    }
}

void kp__flow_lock(struct kp_flow *f, pthread_mutex_t *mu) {
    for (int i = 0; f->spin_us && i < (f->spin_yield ? 4 : 256); i++) {
        if (pthread_mutex_trylock(mu) == 0) return;
        kp__spin_once(f);
    }
    pthread_mutex_lock(mu);
}
