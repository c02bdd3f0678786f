/* Remote queues' two threads at each end: the stage's thread, which runs the
 * end's stage and end functions, and the end's progress thread, which
 * moves the link. Here: how they share UCX's worker (take, give, the
 * turn) and test its operations, the slots the stage's thread hands the
 * progress thread (kp__remote_hand, kp__remote_slots_away), the guard
 * that keeps that thread's sends off a closing endpoint, the slots
 * themselves, and the thread itself. It calls nothing of remote.c, the link's operations, which
 * build on it. The protocol and the wire are described in remote-impl.h. */
#include <poll.h>
#include <stdatomic.h>
#include <time.h>

#include "remote-impl.h"

double kp__remote_ms_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

uint64_t kp__remote_ns_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Operations run without completion callbacks: a request is tested after
 * each progress (kp__poll_all) and freed once it completes, so what a
 * receive got is read from the request itself whichever way it finished.
 * The free takes the worker's lock, under which the progress thread wrote
 * the received bytes: it is also what orders those writes before this
 * thread reads them. (Keeping done requests to free at their op's next
 * post took the lock out of the test, and ThreadSanitizer then saw the
 * receiver read a hello that UCX's thread had just written; on the H100
 * host it had gained nothing measurable either.) */
bool kp__remote_op_poll(kp__op *op) {
    if (!op->req) return false;
    ucs_status_t s = op->recv ? ucp_tag_recv_request_test(op->req, &op->info)
                              : ucp_request_check_status(op->req);
    if (s == UCS_INPROGRESS) return false;
    op->status = s;
    if (op->recv && s == UCS_OK) op->length = op->info.length;
    ucp_request_free(op->req);
    op->req = NULL;
    op->done = true;
    return true;
}

/* The worker's lock (UCX's, in its thread mode MULTI) is a spin lock, and
 * the progress thread takes it again the moment one progress returns, so
 * a stage's thread calling in (a send, a receive posted, a request freed)
 * could spin long on it: pthread_spin_lock had 22% of all samples in both
 * processes with 64 KiB frames on cpu (perf record, 2-core development
 * machine). The stage's thread says it wants the worker, and the progress
 * thread stays off it until the stage's thread is through.
 *
 * It wants it for the whole of its turn in the end's code (the stage and
 * end functions, kp__remote_turn_fn), not call by call: a progress that
 * takes a frame in holds the lock for the frame's read from the socket,
 * and a receiving stage that asked call by call (reposting two receives,
 * crediting, freeing requests) waited for one such progress after
 * another: on the H100 host, 64 KiB frames, pthread_spin_lock was 32%
 * (cuda) and 51% (cpu) of the receiving stage's samples (perf record,
 * scripts/perf-bundle.sh). It lets go while it waits for the link
 * (kp__remote_progress) or for the device (kp__remote_device_sync), and,
 * receiving by CUDA IPC, while it waits for the sender's copy and queues
 * its own copy out of the slot (remote_rx.c, kp__ipc_copied). The
 * count nests: a send, a receive post and a poll still take it, which
 * inside a turn only bumps the count. */
void kp__remote_take(kp__remote *r) {
    if (r->progress_on) atomic_fetch_add_explicit(&r->wanted, 1, memory_order_seq_cst);
}

void kp__remote_give(kp__remote *r) {
    if (r->progress_on) atomic_fetch_sub_explicit(&r->wanted, 1, memory_order_release);
}

/* Only the receiving stage holds the worker for its turn. The sending
 * stage hands its frames to the progress thread, which posts them and
 * takes the credits in (kp__remote_credit_poll), so in a stream the
 * sending stage calls into the worker only to wait; holding it for its
 * turn (its copy on cuda) would only stop the thread that sends. */
void kp__remote_turn_leave(kp__remote *r) {
    if (r->receiver) kp__remote_give(r);
}

void kp__remote_turn_back(kp__remote *r) {
    if (r->receiver) kp__remote_take(r);
}

kp_status kp__remote_device_sync(kp__remote *r, kp_stream_t s, kp_event_t ev) {
    kp__remote_turn_leave(r);
    kp_status st = ev ? kp_event_sync(ev) : kp_stream_sync(s);
    kp__remote_turn_back(r);
    return st;
}

/* The progress thread's sends (a handed frame, a credit) against the
 * endpoint's close, which the stage's thread does: the thread says it is
 * in the endpoint, then reads whether it closes; the close says so, then
 * waits until the thread is out. Each stores first and reads the other's
 * after, so no send reaches an endpoint closed or closing. */
bool kp__remote_ep_enter(kp__remote *r) {
    atomic_store(&r->ep_busy, true);
    if (!atomic_load(&r->ep_off) && r->ep) return true;
    atomic_store_explicit(&r->ep_busy, false, memory_order_release);
    return false;
}

void kp__remote_ep_leave(kp__remote *r) {
    atomic_store_explicit(&r->ep_busy, false, memory_order_release);
}

ucs_status_t kp__remote_hand(kp__remote *r, kp__slot *sl) {
    if (r->progress_on) {
        sl->hdr_op = sl->data_op = (kp__op){0};
        atomic_store(&sl->state, KP__SLOT_HANDED);
        atomic_store(&r->queued, sl->seq + 1);
        int handed = KP__SLOT_HANDED;
        if (!atomic_load(&r->asleep) ||
            !atomic_compare_exchange_strong(&sl->state, &handed, KP__SLOT_OURS))
            return UCS_OK; /* the progress thread posts it, or has */
    }
    return r->post_slot(r, sl);
}

bool kp__remote_slots_away(kp__remote *r) {
    uint64_t queued = atomic_load_explicit(&r->queued, memory_order_seq_cst);
    bool any = false;
    for (; r->scan < queued; r->scan++) {
        kp__slot *sl = &r->slots[r->scan % r->n_slots];
        int handed = KP__SLOT_HANDED;
        /* the stage's thread may have taken it back, and may since have
         * handed the slot's next frame: each is posted once, either way */
        if (!atomic_compare_exchange_strong(&sl->state, &handed, KP__SLOT_POSTING)) continue;
        if (!kp__remote_ep_enter(r)) { /* closing: the stage's thread takes it back */
            atomic_store(&sl->state, KP__SLOT_HANDED);
            break;
        }
        (void)r->post_slot(r, sl); /* a failure is the ops' status (and the link's) */
        kp__remote_ep_leave(r);
        atomic_store_explicit(&sl->state, KP__SLOT_AWAY, memory_order_release);
        atomic_fetch_add_explicit(&r->handed, 1, memory_order_relaxed);
        r->n_away++;
        any = true;
    }
    /* every slot while any is away: at most the credits (1024), and one */
    for (size_t k = 0; r->n_away && k < r->n_slots; k++) {
        kp__slot *sl = &r->slots[k];
        if (atomic_load_explicit(&sl->state, memory_order_relaxed) != KP__SLOT_AWAY) continue;
        kp__remote_op_poll(&sl->hdr_op);
        kp__remote_op_poll(&sl->data_op);
        if (!sl->hdr_op.done || !sl->data_op.done) continue;
        atomic_store_explicit(&sl->state, KP__SLOT_OURS, memory_order_release);
        atomic_fetch_add_explicit(&r->returned, 1, memory_order_release);
        r->n_away--;
        any = true;
    }
    return any;
}

/* The slots (remote-impl.h): made once the stream begins. */
kp_status kp__remote_make_slots(kp__remote *r, const kp_stage_ctx *c) {
    size_t most = r->ipc ? KP__IPC_SLOTS(r->capacity) : r->capacity + 1;
    if (!(r->slots = kp__calloc(most, sizeof *r->slots)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote: no memory for its slots");
    /* UCX reaches the frames' own memory: memory the host shares (cpu),
     * device memory where it has CUDA support */
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(r->dev, &caps));
    r->trade = r->frame_bytes && (r->direct || !caps.device_memory) && !r->ipc;
    r->n_slots = r->capacity;
    /* both ends read the receiver's frame size from the welcome */
    r->packed = r->welcome.frame_bytes <= KP__PACK_MAX - sizeof(kp__wire) || r->ipc;
    for (size_t k = 0; k < r->n_slots; k++) {
        kp__slot *sl = &r->slots[k];
        sl->hdr_op.done = sl->data_op.done = true;
        sl->hdr_op.status = sl->data_op.status = UCS_OK;
        if (r->trade) {
            kp_status st = kp__flow_spare_buffer(c->flow, c->index, &sl->pbuf);
            if (st == KP_ERR_UNSUPPORTED && k == 0) { /* frames on several devices: copies */
                kp_clear_error();
                r->trade = false;
            } else {
                KP_CHECK(st);
                sl->buf = kp_buffer_data(sl->pbuf);
            }
        }
        if (k == 0 && r->frame_bytes && !r->trade) r->n_slots = most; /* a spare, or IPC's */
        if (r->ipc) /* the receiver's slots, mapped at the sender */
            sl->buf = (char *)r->ipc_mem + k * (size_t)r->welcome.ipc_stride;
        else if (r->frame_bytes && !r->trade)
            KP_CHECK(r->direct ? kp_malloc(r->dev, r->frame_bytes, &sl->buf)
                               : kp_malloc_host(r->dev, r->frame_bytes, &sl->buf));
        if (r->receiver) KP_CHECK(kp_event_create_untimed(r->dev, &sl->ev));
    }
    atomic_store(&r->credits, r->capacity);
    atomic_store(&r->zero_copy, r->trade);
    return KP_OK;
}

/* The progress thread: progresses the worker and does the end's work for
 * it (r->away: the slots handed to it, the credits); when nothing moved
 * for a little while, sleeps on its wake-up descriptor (up to 10 ms, so a
 * stop is seen; kp__remote_progress_stop also signals the worker). Of the
 * end it touches only the worker and what the stage's thread hands it.
 *
 * Before it sleeps it says so (r->asleep) and looks for handed work once
 * more; the stage's thread hands a slot (or wants a credit sent), then
 * reads r->asleep, and does the work itself when the thread sleeps
 * (kp__remote_hand; remote_rx.c's kp__credit). Both sides store first and
 * read after, sequentially consistent: one of them sees the other's
 * store, so no frame waits for a sleeping thread. */
static void *kp__progress_main(void *arg) {
    kp__remote *r = arg;
    double busy_until = 0;
    while (!atomic_load_explicit(&r->progress_stop, memory_order_acquire)) {
        if (atomic_load_explicit(&r->wanted, memory_order_acquire)) {
            kp__pause(); /* the stage's thread is in the worker */
            continue;
        }
        bool moved = r->away && r->away(r);
        if (ucp_worker_progress(r->worker) || moved) {
            kp__wake_all(&r->moved);
            busy_until = 0;
            continue;
        }
        double now = kp__remote_ms_now();
        if (busy_until == 0) busy_until = now + 0.05; /* a quick reply costs no wake-up */
        if (now < busy_until) continue;
        busy_until = 0;
        atomic_store(&r->asleep, true);
        if (r->away && r->away(r)) { /* handed as it fell asleep */
            atomic_store(&r->asleep, false);
            kp__wake_all(&r->moved);
            continue;
        }
        if (r->efd >= 0 && ucp_worker_arm(r->worker) == UCS_OK) {
            struct pollfd p = {r->efd, POLLIN, 0};
            (void)poll(&p, 1, 10);
        } else if (r->efd < 0) {
            struct timespec t = {0, 50 * 1000};
            nanosleep(&t, NULL);
        }
        atomic_store(&r->asleep, false);
    }
    return NULL;
}

kp_status kp__remote_progress_start(kp__remote *r) {
    if (pthread_create(&r->progress, NULL, kp__progress_main, r) != 0)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: cannot start its progress thread",
                         r->addr);
    r->progress_on = true;
    return KP_OK;
}

void kp__remote_progress_stop(kp__remote *r) {
    if (!r->progress_on) return;
    atomic_store_explicit(&r->progress_stop, true, memory_order_release);
    (void)ucp_worker_signal(r->worker);
    pthread_join(r->progress, NULL);
    r->progress_on = false;
}
