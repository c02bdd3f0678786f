/* Helper threads that share a kernel launch's blocks. A launch is cut into
 * as many chunks as there are workers (helpers plus the calling stream
 * thread); the caller publishes the job, takes chunks itself, and returns
 * once every chunk has run, so the job may live on its stack. Chunks are
 * claimed and completed under the pool's lock: no thread touches a job
 * after its last chunk is counted. Launches of several streams queue up
 * and are served in order. */
#include <string.h>

#include "cpu-impl.h"

typedef struct kp__cpu_job {
    const kp__cpu_kcall *c;
    uint64_t blocks;                  /* in the grid */
    uint64_t n_chunks, claimed, done; /* under the pool's lock */
    struct kp__cpu_job *next;
} kp__cpu_job;

struct kp__cpu_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work, finished;
    kp__cpu_job *jobs; /* jobs with chunks not yet claimed */
    bool stop;
};

static void kp__chunk_run(const kp__cpu_job *j, uint64_t idx) {
    uint64_t first = j->blocks * idx / j->n_chunks, end = j->blocks * (idx + 1) / j->n_chunks;
    if (end > first) j->c->k->run(j->c->params, j->c->grid, j->c->block, first, end - first);
}

/* Under p->mu: the next chunk of the first job with one left, dropping
 * fully claimed jobs from the queue. NULL when there is none. */
static kp__cpu_job *kp__claim(kp__cpu_pool *p, uint64_t *idx) {
    while (p->jobs && p->jobs->claimed == p->jobs->n_chunks) p->jobs = p->jobs->next;
    kp__cpu_job *j = p->jobs;
    if (j) *idx = j->claimed++;
    return j;
}

static void kp__complete(kp__cpu_pool *p, kp__cpu_job *j) {
    if (++j->done == j->n_chunks) pthread_cond_broadcast(&p->finished);
}

static void *kp__helper(void *arg) {
    kp__cpu_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        uint64_t idx;
        kp__cpu_job *j = kp__claim(p, &idx);
        if (!j) {
            if (p->stop) break;
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        kp__chunk_run(j, idx);
        pthread_mutex_lock(&p->mu);
        kp__complete(p, j);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void kp__cpu_kcall_run(kp__cpu_pool *p, const kp__cpu_kcall *c) {
    uint64_t blocks = (uint64_t)c->grid.x * c->grid.y * c->grid.z;
    if (!p || blocks < 2) {
        c->k->run(c->params, c->grid, c->block, 0, blocks);
        return;
    }
    kp__cpu_job j = {.c = c,
                     .blocks = blocks,
                     .n_chunks = blocks < (uint64_t)p->n + 1 ? blocks : (uint64_t)p->n + 1};
    pthread_mutex_lock(&p->mu);
    kp__cpu_job **tail = &p->jobs;
    while (*tail) tail = &(*tail)->next;
    *tail = &j;
    pthread_cond_broadcast(&p->work);
    /* take chunks of this job until none is left, then wait for the rest */
    while (j.claimed < j.n_chunks) {
        uint64_t idx = j.claimed++;
        pthread_mutex_unlock(&p->mu);
        kp__chunk_run(&j, idx);
        pthread_mutex_lock(&p->mu);
        kp__complete(p, &j);
    }
    for (kp__cpu_job **q = &p->jobs; *q; q = &(*q)->next)
        if (*q == &j) {
            *q = j.next;
            break;
        }
    while (j.done < j.n_chunks) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

kp_status kp__cpu_pool_new(int helpers, kp__cpu_pool **out) {
    kp__cpu_pool *p = kp__calloc(1, sizeof *p);
    pthread_t *t = kp__calloc((size_t)helpers, sizeof *t);
    if (!p || !t) {
        kp__free(p);
        kp__free(t);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu device: no memory for %d workers", helpers + 1);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->finished, NULL);
    p->threads = t;
    for (; p->n < helpers; p->n++) {
        int rc = pthread_create(&t[p->n], NULL, kp__helper, p);
        if (rc != 0) {
            kp__cpu_pool_free(p);
            return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu device: cannot start worker %d: %s",
                             helpers + 1, strerror(rc));
        }
    }
    *out = p;
    return KP_OK;
}

void kp__cpu_pool_free(kp__cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->finished);
    kp__free(p->threads);
    kp__free(p);
}
