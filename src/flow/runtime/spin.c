/* Flows' waiting: a stage spins a while on a queue or the free list before
 * it sleeps, and tries a lock a while before it blocks on it, so that a
 * hand-over arriving soon costs no thread wake-up; past the spin it sleeps
 * on a futex (kp__wake), which costs the waking side nothing while no one
 * sleeps. */
#define _DEFAULT_SOURCE /* syscall() */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "runtime-impl.h"

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

/* A spin that finds the thread was off its core for longer than this
 * between two looks has lost its core to another thread: the host's cores
 * are taken (by the flow's own threads or another program's), and a
 * spinner there only delays itself, because a thread that stays runnable
 * waits for its turn behind every busy thread, while one that sleeps runs
 * at once when woken. On 2 cores with two busy loops beside the flow,
 * spinning made 4 empty stages cost 430 us per frame against 22 us
 * sleeping. */
#define KP__SPIN_GAP_US 50.0
#define KP__SPIN_OFF_MIN_US 1e3 /* after a lost core, no spinning for 1 ms ... */
#define KP__SPIN_OFF_MAX_US 1e6 /* ... doubling while losses follow, up to 1 s */

/* Per thread: until when its waits sleep without spinning, and how long
 * the next lost core sets: a loss within a second of the end of the last
 * period doubles the period, a later one starts again from the minimum. So
 * on a host that stays busy a thread loses its core to a spin about once a
 * second at most, and one that was busy a while ago spins again soon. */
static _Thread_local double kp__spin_off_until, kp__spin_off_us;

static void kp__spin_lost(double now) {
    if (kp__spin_off_us && now - kp__spin_off_until < KP__SPIN_OFF_MAX_US)
        kp__spin_off_us =
            kp__spin_off_us * 2 > KP__SPIN_OFF_MAX_US ? KP__SPIN_OFF_MAX_US : kp__spin_off_us * 2;
    else
        kp__spin_off_us = KP__SPIN_OFF_MIN_US;
    kp__spin_off_until = now + kp__spin_off_us;
}

static bool kp__size_is(const void *v, size_t blocked) {
    return atomic_load_explicit((const _Atomic size_t *)v, memory_order_relaxed) == blocked;
}

static bool kp__u32_is(const void *v, size_t blocked) {
    return atomic_load_explicit((const _Atomic uint32_t *)v, memory_order_relaxed) ==
           (uint32_t)blocked;
}

/* The spin of both kinds of value; inlined into each, so the test is no
 * call. */
static inline void kp__spin_while(struct kp_flow *f, bool (*is)(const void *, size_t),
                                  const void *v, size_t blocked) {
    if (!f->spin_us) return;
    double last = 0, until = 0;
    for (unsigned i = 1;; i++) {
        if (!is(v, blocked)) return;
        if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return;
        if (!last) { /* blocked: spin, unless within a period after a loss */
            last = kp__now_us();
            if (last < kp__spin_off_until) return;
            until = last + f->spin_us;
        }
        kp__spin_once(f);
        /* the clock after the wait, before the condition: a hand-over that
         * came while the thread was off its core still counts the loss */
        if (i % 64 == 0 || f->spin_yield) {
            double now = kp__now_us();
            if (now - last > KP__SPIN_GAP_US) {
                kp__spin_lost(now);
                return;
            }
            if (now >= until) return;
            last = now;
        }
    }
}

void kp__flow_spin_while(struct kp_flow *f, _Atomic size_t *v, size_t blocked) {
    kp__spin_while(f, kp__size_is, (const void *)v, blocked);
}

void kp__flow_spin_while32(struct kp_flow *f, _Atomic uint32_t *v, uint32_t blocked) {
    kp__spin_while(f, kp__u32_is, (const void *)v, blocked);
}

void kp__flow_lock(struct kp_flow *f, pthread_mutex_t *mu) {
    if (f->spin_us && kp__spin_off_until && kp__now_us() < kp__spin_off_until) {
        pthread_mutex_lock(mu);
        return;
    }
    for (int i = 0; f->spin_us && i < (f->spin_yield ? 4 : 256); i++) {
        if (pthread_mutex_trylock(mu) == 0) return;
        kp__spin_once(f);
    }
    pthread_mutex_lock(mu);
}

/* A waiter counts itself in, then (after a full fence) checks its
 * condition; a waker changes the condition, then (after a full fence)
 * reads the count. One of the two sees the other: either the waiter sees
 * the change and does not sleep, or the waker sees the waiter and bumps
 * the sequence, which makes the futex wait return at once or wakes it. */
bool kp__wake_past(const struct timespec *deadline) {
    if (!deadline) return false;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

uint32_t kp__wake_prepare(kp__wake *w) {
    atomic_fetch_add_explicit(&w->waiters, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&w->seq, memory_order_relaxed);
}

void kp__wake_cancel(kp__wake *w) {
    atomic_fetch_sub_explicit(&w->waiters, 1, memory_order_relaxed);
}

void kp__wake_wait(kp__wake *w, uint32_t key, const struct timespec *deadline) {
#ifdef __linux__
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
    (void)syscall(SYS_futex, (uint32_t *)&w->seq, FUTEX_WAIT_BITSET_PRIVATE, key, deadline, NULL,
                  FUTEX_BITSET_MATCH_ANY);
#else
    /* No futex: poll the sequence every 50 us up to the deadline. */
    while (atomic_load_explicit(&w->seq, memory_order_relaxed) == key && !kp__wake_past(deadline)) {
        struct timespec d = {0, 50000};
        nanosleep(&d, NULL);
    }
#endif
    kp__wake_cancel(w);
}

void kp__wake_all(kp__wake *w) {
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&w->waiters, memory_order_relaxed)) return;
    atomic_fetch_add_explicit(&w->seq, 1, memory_order_relaxed);
#ifdef __linux__
    (void)syscall(SYS_futex, (uint32_t *)&w->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
}
