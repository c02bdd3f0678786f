/* Remote queues' sending end, a flow's sink: connects (again and again
 * while the receiver is not up yet, within the timeout), says hello and
 * reads the welcome; sends each frame's header and bytes while it has
 * credit; at end of stream says how many frames there were and waits for
 * the receiver to have them all. The wire: remote-impl.h. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "remote-impl.h"

/* The hello, naming this end's host and published worker address. */
static void kp__hello_make(kp__remote *r) {
    r->hello = (kp__hello){.magic = KP__MAGIC,
                           .version = KP__VERSION,
                           .frame_bytes = r->frame_bytes,
                           .flags = kp__ipc_frames(r) ? KP__HELLO_CUDA : 0};
    kp__lane_host(r->hello.host);
    kp__lane_publish(r, &r->hello.lane_pid, &r->hello.lane_nonce);
}

/* Connects (again and again while the receiver is not up yet, within the
 * timeout), says hello and reads the welcome. */
static kp_status kp__sender_ready(kp__remote *r, const kp_stage_ctx *c) {
    kp_flow_t flow = c->flow;
    if (r->ready) return KP_OK;
    double start = kp__remote_ms_now();
    bool spun = false;
    for (;;) {
        if (!r->ep) {
            KP_CHECK(kp__remote_ep_create(r, NULL));
            kp__hello_make(r);
            kp_status cs = kp__remote_recv(r, &r->welcome_op, r->peer_msg, sizeof r->peer_msg,
                                           KP__TAG(KP__T_WELCOME, 0), KP__TYPE_MASK);
            /* control messages from the start: a refused or cancelled
             * sender hears the receiver's answer to its cancel */
            if (cs == KP_OK)
                cs = kp__remote_recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
                                     KP__TAG(KP__T_CTRL, 0), KP__TYPE_MASK);
            /* the progress thread may have seen the endpoint fail already
             * (nobody listens yet): that is a try to make again, below */
            if (cs == KP_OK)
                cs = kp__remote_send(r, &r->hello_op, &r->hello, sizeof r->hello,
                                     KP__TAG(KP__T_HELLO, 0));
            if (cs != KP_OK) {
                kp_clear_error();
                if (r->failed == UCS_OK) r->failed = UCS_ERR_UNREACHABLE;
            }
        }
        kp__remote_progress(r, &spun);
        if (r->welcome_op.done) break;
        if (kp_flow_cancelled(flow)) return KP_OK;
        bool late = r->timeout_ms && kp__remote_ms_now() - start > r->timeout_ms;
        if (r->failed == UCS_ERR_REJECTED)
            return kp__error(KP_ERR_STATE,
                             "remote %s: the receiver refused the connection (it has a sender "
                             "already, or its flow has stopped)",
                             r->addr);
        if (r->failed != UCS_OK || (r->hello_op.done && r->hello_op.status != UCS_OK)) {
            if (late)
                return kp__error(KP_ERR_IO, "remote %s: no receiver within %d ms (%s)", r->addr,
                                 r->timeout_ms, ucs_status_string(r->failed));
            kp__remote_op_cancel(r, &r->welcome_op);
            kp__remote_op_cancel(r, &r->hello_op);
            kp__remote_op_cancel(r, &r->ctrl_op);
            r->ctrl_op.done = false;
            kp__remote_ep_close(r, false);
            struct timespec t = {0, 20 * 1000 * 1000};
            kp__remote_turn_leave(r);
            nanosleep(&t, NULL);
            kp__remote_turn_back(r);
        } else if (late) {
            return kp__error(KP_ERR_IO, "remote %s: no receiver within %d ms (no answer)", r->addr,
                             r->timeout_ms);
        }
    }
    const kp__welcome *w = &r->welcome;
    size_t got = r->welcome_op.length;
    if (r->welcome_op.status == UCS_OK && got >= 8)
        memcpy(&r->welcome, r->peer_msg, got < sizeof *w ? got : sizeof *w);
    if (r->welcome_op.status != UCS_OK || got < 8 || w->magic != KP__MAGIC)
        return kp__error(KP_ERR_PARSE, "remote %s: the peer is not a kpipe remote source", r->addr);
    if (w->version != KP__VERSION)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "remote %s: the receiver speaks the wire's version %u, this kpipe %u",
                         r->addr, w->version, KP__VERSION);
    if (got != sizeof *w)
        return kp__error(KP_ERR_PARSE, "remote %s: a malformed welcome (%zu bytes)", r->addr, got);
    if (w->refused == KP__REFUSED_CANCELLED)
        return kp__error(KP_ERR_STATE,
                         "remote %s: the peer cancelled the stream (before its first frame)",
                         r->addr);
    if (w->refused)
        return kp__error(KP_ERR_INVALID_ARG,
                         "remote %s: the receiver takes frames of %llu bytes, these are %zu",
                         r->addr, (unsigned long long)w->frame_bytes, r->frame_bytes);
    if (w->capacity < 1 || w->capacity > r->capacity)
        return kp__error(KP_ERR_PARSE, "remote %s: a capacity of %llu (1 .. %zu here)", r->addr,
                         (unsigned long long)w->capacity, r->capacity);
    r->capacity = (size_t)w->capacity; /* the receiver's queue sets the credits */
    KP_CHECK(kp__lane_open(r, w->host, w->lane_pid, w->lane_nonce));
    KP_CHECK(kp__ipc_take(r, w));
    if (w->ipc_slots) /* the answer: yes with the events, or no */
        KP_CHECK(kp__remote_send(r, &r->ipc_op, r->ipc_msg, r->ipc_msg_len, KP__TAG(KP__T_IPC, 0)));
    atomic_store(&r->lane_set, true);
    KP_CHECK(kp__remote_make_slots(r, c));
    KP_CHECK(kp__remote_credit_post(r));
    r->ready = true;
    return KP_OK;
}

static bool kp__has_credit(const kp__remote *r) { return r->sent - r->consumed < r->capacity; }

static bool kp__slot_free(const kp__remote *r) {
    return kp__remote_slot_ended(&r->slots[r->sent % r->n_slots]);
}

static bool kp__last_sent(const kp__remote *r) {
    return kp__remote_slot_ended(&r->slots[(r->sent - 1) % r->n_slots]);
}

/* Frames before r->left have all left: it moves on over those whose
 * sends completed, in order, while their slots still hold them. */
static void kp__count_left(kp__remote *r) {
    while (r->left < r->sent && kp__remote_slot_ended(&r->slots[r->left % r->n_slots])) r->left++;
}

/* Posts a filled-in slot's sends (kp__remote.post_slot), from either
 * thread: its header and bytes as one message of two pieces where frames
 * pack (kp__remote.packed), else as two messages. Not one iov above that
 * size: UCX 1.13 sends an iov past its rendezvous size without zero copy,
 * 1.2 GB/s against 5.3 for 1 MiB frames over tcp on loopback. Packing
 * first gained nothing (64 KiB frames on the H100 host: 0.66-0.79 GB/s
 * against 0.74-1.12 on cpu), while the stage's threads, not the link,
 * held a frame; once the progress threads did the link's work and were
 * the bound, it took 64 KiB frames from 2.23 to 2.76 GB/s on cpu and 2.00
 * to 2.12 on cuda (medians of four rounds, bench/RESULTS.md). */
static ucs_status_t kp__post_sends(kp__remote *r, kp__slot *sl) {
    if (r->packed) { /* one message: the header, then the bytes */
        sl->iov[0] = (ucp_dt_iov_t){&sl->hdr, sizeof sl->hdr};
        sl->iov[1] = (ucp_dt_iov_t){sl->buf, (size_t)sl->hdr.bytes};
        sl->data_op = (kp__op){.done = true, .status = UCS_OK};
        /* CUDA IPC: the bytes are in the receiver's slot already */
        return kp__remote_post_iov(r, &sl->hdr_op, sl->iov, sl->hdr.bytes && !r->ipc ? 2 : 1,
                                   KP__TAG(KP__T_DATA, sl->seq));
    }
    ucs_status_t s =
        kp__remote_post(r, &sl->hdr_op, &sl->hdr, sizeof sl->hdr, KP__TAG(KP__T_HDR, sl->seq));
    if (s == UCS_OK)
        s = kp__remote_post(r, &sl->data_op, sl->buf, (size_t)sl->hdr.bytes,
                            KP__TAG(KP__T_DATA, sl->seq));
    else
        sl->data_op = (kp__op){.done = true, .status = s};
    return s;
}

/* The progress thread's work for the sender (kp__remote.away): takes the
 * credits in, then posts the frames handed to it and tests their sends
 * (kp__remote_slots_away). The stage's thread hands a frame once its
 * bytes are in its slot and it has a credit; it no longer writes the
 * frame into the socket itself (with eager sends, UCX writes a frame out
 * in the call that posts it), nor takes the worker to free requests or
 * repost the credits' receive, and goes on to the next frame meanwhile.
 * On the H100 host, 64 KiB frames: the sending stage's thread had spent
 * 81-83% of its samples writing sockets (and, on cuda, copying) while
 * this thread idled 74-90%; with the sends handed over but the credits
 * still its own, it spent half its samples waiting for UCX's worker lock,
 * which this thread held to send (bench/RESULTS.md, "Remote queues,
 * latest"). */
static bool kp__sender_away(kp__remote *r) {
    bool any =
        atomic_load_explicit(&r->credit_away, memory_order_acquire) && kp__remote_credit_poll(r);
    return kp__remote_slots_away(r) || any;
}

/* Takes back every frame handed and not yet posted, and waits out a post
 * under way: before the endpoint closes, or the peer hears a cancel.
 * Frames away stay the progress thread's until their sends end (the
 * endpoint's close ends them). */
static void kp__unhand(kp__remote *r) {
    for (size_t k = 0; r->progress_on && r->slots && k < r->n_slots; k++) {
        int handed = KP__SLOT_HANDED;
        if (atomic_compare_exchange_strong(&r->slots[k].state, &handed, KP__SLOT_OURS))
            r->slots[k].hdr_op.done = r->slots[k].data_op.done = true; /* never sent */
        while (atomic_load(&r->slots[k].state) == KP__SLOT_POSTING) kp__pause();
    }
}

static kp_status kp__sink_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__remote *r = user;
    bool stop = false;
    if (eos) return kp__error(KP_ERR_INVALID_ARG, "a remote sink cannot be a flow's first stage");
    KP_CHECK(kp__sender_ready(r, c));
    if (kp_flow_cancelled(c->flow)) return KP_OK;
    if (f->bytes > r->frame_bytes)
        return kp__error(KP_ERR_INVALID_ARG, "remote %s: frame %llu has %zu bytes, more than %zu",
                         r->addr, (unsigned long long)f->seq, f->bytes, r->frame_bytes);
    /* the slot first, then the credit: a frame's copy into its slot runs
     * while the credit is on its way (a spare slot, n_slots). Copying
     * further ahead was built and measured: the stage put a frame into a
     * free slot (its copy started, not waited for) and returned, and the
     * end's progress thread sent it once the copy was done and a credit
     * came back (the receiver's likewise reposted slots and gave credits
     * back as copies out ended). On the H100 host, cuda, alternated with
     * this code in six calls of 3 to 8 rounds, medians: 64 KiB 1.24-1.53
     * GB/s against 1.29-1.51, 1 MiB 3.71-4.91 against 3.58-4.27, 8 MiB
     * 4.00-4.32 against 4.22-4.59; 4, 8 or 16 credits alike. That is
     * within the runs' spread, and it took a lock between the stage's
     * thread and the progress thread: dropped. The copy was not what held
     * a frame (bench/RESULTS.md, "Remote queues, the round before: the
     * stage's turn holds the worker"). */
    KP_CHECK(kp__remote_wait_timed(r, c->flow, kp__slot_free, &stop, &r->wait_ns));
    if (stop) return KP_OK;
    kp__count_left(r); /* before the slot of frame sent - n_slots takes frame sent */
    kp__slot *sl = &r->slots[r->sent % r->n_slots];
    if (sl->hdr_op.status != UCS_OK || sl->data_op.status != UCS_OK)
        return kp__remote_link_error(r, sl->hdr_op.status != UCS_OK ? sl->hdr_op.status
                                                                    : sl->data_op.status);
    if (r->trade) { /* the frame goes on with the slot's buffer; its own goes out */
        if (f->bytes) KP_CHECK(kp__remote_device_sync(r, c->stream, NULL)); /* bytes written */
        kp__frame_trade(f, &sl->pbuf);
        sl->buf = kp_buffer_data(sl->pbuf);
    } else if (f->bytes && !r->ipc) { /* the last frames are on the wire meanwhile */
        KP_CHECK(kp_memcpy_async(c->stream, sl->buf, f->data, f->bytes));
        KP_CHECK(kp__remote_device_sync(r, c->stream, NULL));
    }
    if (!kp__has_credit(r)) atomic_fetch_add_explicit(&r->credit_waits, 1, memory_order_relaxed);
    KP_CHECK(kp__remote_wait_timed(r, c->flow, kp__has_credit, &stop, &r->wait_ns));
    if (stop) return KP_OK;
    if (r->ipc) {
        /* into the receiver's slot, which the credit says it is done with;
         * the receiver waits for the event, and this frame's
         * buffer is reused only after this stream's work (the flow's) */
        if (f->bytes) KP_CHECK(kp_memcpy_async(c->stream, sl->buf, f->data, f->bytes));
        KP_CHECK(kp_event_record(r->ipc_ev[r->sent % r->n_slots], c->stream));
    }
    kp__wire *w = &sl->hdr;
    memset(w, 0, sizeof *w);
    w->seq = r->sent;
    w->bytes = f->bytes;
    w->dtype = (int32_t)f->desc.dtype;
    w->ndim = f->desc.ndim;
    memcpy(w->shape, f->desc.shape, sizeof w->shape);
    memcpy(w->strides, f->desc.strides, sizeof w->strides);
    w->offset = f->desc.offset;
    memcpy(w->user, f->user, sizeof w->user);
    sl->seq = r->sent;
    ucs_status_t posted = kp__remote_hand(r, sl);
    if (posted != UCS_OK) return kp__remote_link_error(r, posted);
    r->sent++;
    kp__count_left(r);
    /* a frame the receiver consumed has left, though the progress thread
     * may not have seen its sends complete yet */
    uint64_t on_wire = r->sent - (r->left > r->consumed ? r->left : r->consumed);
    if (on_wire > atomic_load_explicit(&r->max_on_wire, memory_order_relaxed))
        atomic_store_explicit(&r->max_on_wire, on_wire, memory_order_relaxed);
    uint64_t in_flight = r->sent - r->consumed;
    if (in_flight > atomic_load_explicit(&r->max_in_flight, memory_order_relaxed))
        atomic_store_explicit(&r->max_in_flight, in_flight, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->frames, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bytes, f->bytes, memory_order_relaxed);
    /* the progress thread moves it from here; without one (a UCX built
     * without threads) only this thread does, and it may sit in the flow's
     * queue for a long time before the next frame (a large send needs the
     * sender to answer the receiver): the frame leaves now */
    return r->progress_on ? KP_OK : kp__remote_wait(r, c->flow, kp__last_sent, &stop);
}

static bool kp__all_sent(const kp__remote *r) {
    for (size_t k = 0; k < r->n_slots; k++)
        if (!kp__remote_slot_ended(&r->slots[k])) return false;
    return true;
}

static bool kp__done_seen(const kp__remote *r) { return r->done_seen; }

/* At end of stream: says how many frames there were and waits until the
 * receiver has them all. Cancelled or failed: tells the receiver. */
static kp_status kp__sink_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__remote *r = user;
    bool stop = false;
    if (why == KP_OK) {
        KP_CHECK(kp__sender_ready(r, c));
        KP_CHECK(kp__remote_wait(r, c->flow, kp__all_sent, &stop));
        if (!stop) KP_CHECK(kp__remote_ctrl(r, KP__C_EOS, r->sent));
        if (!stop) KP_CHECK(kp__remote_wait(r, c->flow, kp__done_seen, &stop));
        if (!stop) {
            /* every frame is in: the receiver's slots are unmapped before
             * it hears BYE and may free them */
            kp__ipc_free(r);
            if (kp__remote_ctrl(r, KP__C_BYE, 0) != KP_OK) kp_clear_error(); /* all is delivered */
            kp__remote_ep_close(r, true);
            return KP_OK;
        }
    }
    kp__unhand(r);
    /* no copy of ours may still write the receiver's slots once it hears
     * the cancel (and may free them) */
    if (r->ipc && kp_stream_sync(c->stream) != KP_OK) kp_clear_error();
    kp__ipc_free(r);
    kp__remote_tell_cancel(r);
    return KP_OK;
}

kp_status kp__remote_sink_make(const kp__remote_end *e, kp__stage_made *out) {
    return kp__remote_stage_made(e, kp__sink_fn, kp__sink_end, NULL, kp__post_sends,
                                 kp__sender_away, out);
}
