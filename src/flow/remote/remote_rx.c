/* Remote queues' receiving end, a flow's source: takes one sender's
 * connection and hello, welcomes it (or refuses it), posts the receives of
 * the next `capacity` frames into its slots, and reposts a slot once its
 * frame has reached the device, giving the sender a credit back. The
 * wire: remote-impl.h. */
#include <stdatomic.h>
#include <string.h>

#include "remote-impl.h"

/* A slot's two receives, its header's and its bytes' (kp__remote.post_slot). */
static ucs_status_t kp__post_recvs(kp__remote *r, kp__slot *sl) {
    if (r->packed) { /* one message: the header, then the bytes */
        sl->iov[0] = (ucp_dt_iov_t){&sl->hdr, sizeof sl->hdr};
        sl->iov[1] = (ucp_dt_iov_t){sl->buf, r->frame_bytes};
        sl->data_op = (kp__op){.done = true, .status = UCS_OK};
        /* CUDA IPC: the header alone; the bytes are in the slot */
        return kp__remote_post_recv_iov(r, &sl->hdr_op, sl->iov, r->frame_bytes && !r->ipc ? 2 : 1,
                                        KP__TAG(KP__T_DATA, sl->seq), ~(ucp_tag_t)0);
    }
    ucs_status_t s = kp__remote_post_recv(r, &sl->hdr_op, &sl->hdr, sizeof sl->hdr,
                                          KP__TAG(KP__T_HDR, sl->seq), ~(ucp_tag_t)0);
    if (s == UCS_OK)
        s = kp__remote_post_recv(r, &sl->data_op, sl->buf, r->frame_bytes,
                                 KP__TAG(KP__T_DATA, sl->seq), ~(ucp_tag_t)0);
    else
        sl->data_op = (kp__op){.done = true, .status = s};
    return s;
}

/* The receives of frame seq, into its slot: handed to the progress thread
 * (kp__remote_hand), which tests them too, so the stage's thread takes
 * the worker for neither. */
static kp_status kp__post_frame(kp__remote *r, uint64_t seq) {
    kp__slot *sl = &r->slots[seq % r->n_slots];
    sl->seq = seq;
    ucs_status_t s = kp__remote_hand(r, sl);
    return s == UCS_OK ? KP_OK : kp__remote_link_error(r, s);
}

/* Raises the last credit sent to v; false where it was v or more (the
 * other thread sent it). */
static bool kp__credit_raise(kp__remote *r, uint64_t v) {
    uint64_t out = atomic_load(&r->credit_out);
    while (out < v)
        if (atomic_compare_exchange_weak(&r->credit_out, &out, v)) return true;
    return false;
}

/* Tells the sender how many frames were consumed: at once when `now` (the
 * receiver is about to wait for a frame), else once a quarter of the
 * window has gathered. A frame costs three messages on the wire (header,
 * bytes, credit); while frames keep coming, credits ride in batches and
 * it costs fewer. The sender never starves: a receiver with no frame in
 * hand has sent every credit. With a progress thread, that thread sends
 * them (kp__receiver_away) unless it sleeps, when the stage's thread
 * sends a credit it wants now itself: like a handed slot, each side
 * stores first and reads the other's after. */
static kp_status kp__credit(kp__remote *r, bool now) {
    uint64_t batch = r->capacity / 4 ? r->capacity / 4 : 1;
    if (r->progress_on) {
        atomic_store(&r->consumed_pub, r->consumed);
        if (!now || atomic_load(&r->credit_out) >= r->consumed) return KP_OK;
        atomic_store(&r->credit_now, r->consumed);
        if (!atomic_load(&r->asleep)) return KP_OK; /* it sends it */
    } else if (!now && r->consumed - atomic_load(&r->credit_out) < batch) {
        return KP_OK;
    }
    if (!kp__credit_raise(r, r->consumed)) return KP_OK;
    return kp__remote_ctrl(r, KP__C_CREDIT, r->consumed);
}

/* The progress thread's work for the receiver (kp__remote.away): posts the
 * receives handed to it and tests them (kp__remote_slots_away), and gives
 * the sender its credits: a batch, or what the stage's thread wants sent
 * now. The receiving stage's thread then takes the worker for none of
 * it; it had spent 44% (cpu) and 22% (cuda) of its samples waiting for
 * UCX's worker lock, 64 KiB frames on the H100 host (bench/RESULTS.md,
 * "Remote queues, latest"). */
static bool kp__receiver_away(kp__remote *r) {
    uint64_t consumed = atomic_load(&r->consumed_pub); /* every slot it counts is handed */
    bool any = kp__remote_slots_away(r);
    kp__op *op = &r->credit_op;
    kp__remote_op_poll(op);
    if (op->req) return any; /* the last credit is still on its way */
    uint64_t out = atomic_load(&r->credit_out);
    if (consumed <= out) return any;
    /* a frame was consumed, so the stream began: the capacity the welcome
     * granted (kp__receiver_ready) was set before, and is read after */
    uint64_t batch = r->capacity / 4 ? r->capacity / 4 : 1;
    if (consumed - out < batch && atomic_load(&r->credit_now) <= out) return any;
    if (!kp__remote_ep_enter(r)) return any; /* the link closes: no more credits */
    if (kp__credit_raise(r, consumed)) {
        op->msg[0] = KP__C_CREDIT;
        op->msg[1] = consumed;
        (void)kp__remote_post(r, op, op->msg, sizeof op->msg, KP__TAG(KP__T_CREDIT, 0));
        any = true;
    }
    kp__remote_ep_leave(r);
    return any;
}

/* The copy still running out of the slot that the receive of frame
 * consumed + capacity takes (the slot's last frame, taken already), or
 * NULL where the slot is new. With a spare slot (n_slots) that is the
 * frame before the last one taken, not the oldest. */
static kp_event_t kp__slot_copy(const kp__remote *r) {
    uint64_t seq = r->consumed + r->capacity;
    return seq >= r->n_slots ? r->slots[seq % r->n_slots].ev : NULL;
}

/* Slots whose frames have reached the device take the receives of the
 * frames `capacity` on; the sender hears how many were consumed. */
static kp_status kp__reclaim(kp__remote *r, bool now) {
    while (r->consumed < r->next) {
        bool done = true;
        kp_event_t ev = kp__slot_copy(r);
        if (ev) KP_CHECK(kp_event_query(ev, &done));
        if (!done) break;
        KP_CHECK(kp__post_frame(r, r->consumed + r->capacity));
        r->consumed++;
    }
    return kp__credit(r, now);
}

static kp_status kp__recycle(kp__remote *r) { return kp__reclaim(r, false); }

/* While the stage waits for a frame: every credit goes back. A copy still
 * running is waited for here: its end is no event on the link, so the
 * wait would otherwise sleep up to a millisecond on the link before the
 * slot is reposted and its credit given back, while a sender short of
 * credit sends nothing to wake it. (The frame being waited for lands
 * meanwhile: the progress thread takes it in.) */
static kp_status kp__recycle_waiting(kp__remote *r) {
    KP_CHECK(kp__reclaim(r, true));
    if (r->consumed < r->next && kp__slot_copy(r)) {
        KP_CHECK(kp__remote_device_sync(r, NULL, kp__slot_copy(r)));
        KP_CHECK(kp__reclaim(r, true));
    }
    return KP_OK;
}

/* Takes a sender's connection request, once, and posts the receive of its
 * hello; whether the hello is in. */
static kp_status kp__receiver_accept(kp__remote *r, bool *hello_in) {
    *hello_in = false;
    ucp_conn_request_h req = atomic_exchange(&r->pending, NULL);
    if (req && (r->ep || atomic_exchange(&r->accepted, true)))
        ucp_listener_reject(r->listener, req); /* one sender per remote source */
    else if (req)
        KP_CHECK(kp__remote_ep_create(r, req));
    bool posted = r->hello_op.req || r->hello_op.done;
    if (r->ep && !posted) {
        KP_CHECK(kp__remote_recv(r, &r->hello_op, r->peer_msg, sizeof r->peer_msg,
                                 KP__TAG(KP__T_HELLO, 0), KP__TYPE_MASK));
        /* control messages from the start: a sender cancelled before it read
         * the welcome says so, and hears the answer to its cancel */
        KP_CHECK(kp__remote_recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
                                 KP__TAG(KP__T_CTRL, 0), KP__TYPE_MASK));
    }
    *hello_in = r->ep && r->hello_op.done;
    return KP_OK;
}

/* Takes the sender's connection and hello; welcomes it (or refuses frames
 * larger than ours) and posts the first window of receives. */
static kp_status kp__receiver_ready(kp__remote *r, const kp_stage_ctx *c, bool *stop) {
    kp_flow_t flow = c->flow;
    *stop = false;
    if (r->ready) return KP_OK;
    double start = kp__remote_ms_now();
    bool spun = false, hello_in = false;
    for (;;) {
        KP_CHECK(kp__receiver_accept(r, &hello_in));
        if (hello_in) break;
        if (r->failed != UCS_OK) return kp__remote_link_error(r, r->failed);
        if (kp_flow_cancelled(flow)) {
            *stop = true;
            return KP_OK;
        }
        if (r->timeout_ms && kp__remote_ms_now() - start > r->timeout_ms)
            return kp__error(KP_ERR_IO, "remote %s: no sender within %d ms", r->addr,
                             r->timeout_ms);
        kp__remote_progress(r, &spun);
    }
    const kp__hello *h = &r->hello;
    size_t got = r->hello_op.length;
    if (r->hello_op.status == UCS_OK && got >= 8)
        memcpy(&r->hello, r->peer_msg, got < sizeof *h ? got : sizeof *h);
    if (r->hello_op.status != UCS_OK || got < 8 || h->magic != KP__MAGIC)
        return kp__error(KP_ERR_PARSE, "remote %s: the peer is not a kpipe remote sink", r->addr);
    if (h->version != KP__VERSION)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "remote %s: the sender speaks the wire's version %u, this kpipe %u",
                         r->addr, h->version, KP__VERSION);
    if (got != sizeof *h)
        return kp__error(KP_ERR_PARSE, "remote %s: the peer is not a kpipe remote sink (a hello "
                         "of %zu bytes)", r->addr, got);
    r->welcome = (kp__welcome){.magic = KP__MAGIC,
                               .version = KP__VERSION,
                               .capacity = r->capacity,
                               .frame_bytes = r->frame_bytes,
                               .refused = h->frame_bytes > r->frame_bytes ? KP__REFUSED_SIZE : 0};
    if (!r->welcome.refused) {
        /* the lane first, the welcome on it */
        KP_CHECK(kp__lane_open(r, h->host, h->lane_pid, h->lane_nonce));
        KP_CHECK(kp__ipc_offer(r, h, &r->welcome));
        if (r->watch && !r->welcome.ipc_slots && h->frame_bytes >= KP__LANE_WIDE_BYTES &&
            r->capacity > KP__LANE_WINDOW) /* one host, no IPC offered, large frames */
            r->capacity = r->welcome.capacity = KP__LANE_WINDOW;
        if (r->welcome.ipc_slots)
            KP_CHECK(kp__remote_recv(r, &r->ipc_op, r->ipc_msg, r->ipc_msg_len,
                                     KP__TAG(KP__T_IPC, 0), KP__TYPE_MASK));
    }
    kp__lane_host(r->welcome.host);
    /* an address only for a sender that published one: it can make a lane */
    if (h->lane_pid && !r->welcome.refused)
        kp__lane_publish(r, &r->welcome.lane_pid, &r->welcome.lane_nonce);
    KP_CHECK(kp__remote_send(r, &r->welcome_op, &r->welcome, sizeof r->welcome,
                             KP__TAG(KP__T_WELCOME, 0)));
    if (r->welcome.refused) {
        kp__remote_linger(r);
        return kp__error(KP_ERR_INVALID_ARG,
                         "remote %s: the sender's frames have %llu bytes, more than this "
                         "source's frame_bytes (%zu)",
                         r->addr, (unsigned long long)h->frame_bytes, r->frame_bytes);
    }
    KP_CHECK(kp__remote_wait(r, c->flow, kp__ipc_answered, stop));
    if (*stop) return KP_OK;
    KP_CHECK(kp__ipc_answer(r));
    atomic_store(&r->lane_set, true);
    KP_CHECK(kp__remote_make_slots(r, c));
    for (uint64_t s = 0; s < r->capacity; s++) KP_CHECK(kp__post_frame(r, s));
    r->ready = true;
    return KP_OK;
}

static bool kp__frame_in(const kp__remote *r) {
    return kp__remote_slot_ended(&r->slots[r->next % r->n_slots]) ||
           (r->eos_seen && r->next >= r->eos_total);
}

/* Checks a header from the wire before anything of it is used. */
static kp_status kp__check_frame(kp__remote *r, const kp__slot *sl, kp_frame *f) {
    const kp__wire *w = &sl->hdr;
    if (sl->hdr_op.status != UCS_OK || sl->data_op.status != UCS_OK)
        return sl->hdr_op.status == UCS_ERR_MESSAGE_TRUNCATED ||
                       sl->data_op.status == UCS_ERR_MESSAGE_TRUNCATED
                   ? kp__error(KP_ERR_PARSE, "remote %s: frame %llu is larger than %zu bytes",
                               r->addr, (unsigned long long)r->next, r->frame_bytes)
                   : kp__remote_link_error(r, sl->hdr_op.status != UCS_OK ? sl->hdr_op.status
                                                                          : sl->data_op.status);
    /* packed: one message, the header then the bytes */
    size_t hdr_len =
        r->packed ? (sl->hdr_op.length < sizeof *w ? 0 : sizeof *w) : sl->hdr_op.length;
    size_t data_len = r->packed ? sl->hdr_op.length - hdr_len : sl->data_op.length;
    if (r->ipc) /* the header alone; its bytes are in the slot */
        data_len = hdr_len == sl->hdr_op.length && w->bytes <= r->frame_bytes ? (size_t)w->bytes
                                                                               : SIZE_MAX;
    if (hdr_len != sizeof *w || w->seq != r->next || w->bytes != data_len || w->bytes > f->capacity)
        return kp__error(KP_ERR_PARSE,
                         "remote %s: frame %llu: a malformed header (seq %llu, %llu bytes, "
                         "%zu received)",
                         r->addr, (unsigned long long)r->next, (unsigned long long)w->seq,
                         (unsigned long long)w->bytes, data_len);
    kp_tensor_desc d = {0};
    if (w->ndim < 0 || w->ndim > KP_MAX_DIMS)
        return kp__error(KP_ERR_PARSE, "remote %s: frame %llu: %d dimensions", r->addr,
                         (unsigned long long)r->next, w->ndim);
    d.dtype = (kp_dtype)w->dtype;
    d.ndim = w->ndim;
    memcpy(d.shape, w->shape, sizeof d.shape);
    memcpy(d.strides, w->strides, sizeof d.strides);
    d.offset = w->offset;
    static const kp_tensor_desc none = {0};
    if (memcmp(&d, &none, sizeof d) != 0 && kp_desc_validate(&d) != KP_OK)
        return kp__error_prefix(KP_ERR_PARSE, "remote %s: frame %llu: its descriptor", r->addr,
                                (unsigned long long)r->next);
    f->desc = d;
    f->bytes = (size_t)w->bytes;
    memcpy(f->user, w->user, sizeof f->user);
    return KP_OK;
}

/* One look at the link from kp__ipc_wait_copy, with the stage's turn. */
static kp_status kp__ipc_look(kp__remote *r, kp_flow_t flow, bool *stop, double *t0,
                              double failed_at) {
    KP_CHECK(kp__remote_ctrl_poll(r));
    KP_CHECK(kp__remote_ended(r, flow, stop));
    if (*stop) return KP_OK;
    double now = kp__remote_ms_now();
    if (failed_at > 0 && now - failed_at > 2000)
        return kp__error(KP_ERR_IO, "remote %s: frame %llu: the sender's copy event failed",
                         r->addr, (unsigned long long)r->next);
    if (*t0 == 0) *t0 = now;
    if (failed_at > 0 || now - *t0 > 1.0) {
        bool spun = false;
        kp__remote_progress(r, &spun);
    }
    return KP_OK;
}

/* CUDA IPC: waits on the host until the sender's copy into the slot has
 * run. The receiver's stream never waits on the sender's event itself: a
 * sender killed between recording its event and the copy's end leaves that
 * event never done, and a stream waiting on it hangs every later
 * synchronisation of this process, the flow's teardown included (an H200,
 * test_remote's sender_killed: 2 runs of 16 hung with four at once). Here
 * the link is watched meanwhile, so a lost sender ends the flow with "lost
 * the peer". A copy's event is done within microseconds (the header left
 * after the copy was queued), so the wait spins on the event, looking at
 * the link every 64 queries. It spins without the stage's turn, which
 * kp__ipc_copied left, so a progress thread moves the link meanwhile, and
 * takes the turn back for each look. After the first millisecond, or once
 * a query fails (the sender's context gone), it moves the link at each
 * look (kp__remote_progress: itself, or where a progress thread is, that
 * thread, up to a millisecond): a lost sender would otherwise end the wait
 * only by a failed query. A failed query gives the link two seconds to
 * say so before its own error. */
static kp_status kp__ipc_wait_copy(kp__remote *r, kp_flow_t flow, kp_event_t ev, bool *stop) {
    *stop = false;
    double t0 = 0, failed_at = 0;
    for (unsigned k = 0;; k++) {
        bool done = false;
        kp_status qs = failed_at > 0 ? KP_OK : kp_event_query(ev, &done);
        if (qs == KP_OK && done) return KP_OK;
        if (qs != KP_OK) failed_at = kp__remote_ms_now();
        if (qs == KP_OK && failed_at == 0 && (k & 63) != 63) continue;
        kp__remote_turn_back(r);
        kp_status st = kp__ipc_look(r, flow, stop, &t0, failed_at);
        kp__remote_turn_leave(r);
        if (st != KP_OK || *stop) return st;
    }
}

/* kp__ipc_wait_copy, its time added to the end's ipc_wait_ns where the
 * copy had not ended at the first look. The stage leaves its turn on the
 * worker for the wait, as kp__remote_device_sync does, and likewise for
 * its copy out of the slot (kp__copy_out): holding it, the stage kept the
 * progress thread off the worker for a frame's whole run, and the credits
 * and headers that thread sends and takes in waited for the run's end
 * (8-29 us a frame, more as frames grow: stamps on both ends, two
 * processes on one H200 under MPS, bench/RESULTS.md). There, leaving the
 * turn took 8 MiB frames from 45-47 to 50-54 thousand a second. (Without
 * MPS, where two processes' contexts take turns on the GPU at about 100
 * us a frame, the same change had measured 3-7% slower.) */
static kp_status kp__ipc_copied(kp__remote *r, kp_flow_t flow, kp_event_t ev, bool *stop) {
    bool done = false;
    *stop = false;
    if (kp_event_query(ev, &done) == KP_OK && done) return KP_OK;
    const uint64_t t0 = kp__remote_ns_now();
    kp__remote_turn_leave(r);
    kp_status st = kp__ipc_wait_copy(r, flow, ev, stop);
    kp__remote_turn_back(r);
    atomic_fetch_add_explicit(&r->ipc_wait_ns, kp__remote_ns_now() - t0, memory_order_relaxed);
    return st;
}

/* The frame's bytes out of its slot into the frame, the copy's end marked
 * by the slot's event; the link is the progress thread's meanwhile (the
 * two calls take 6-8 us of host time under MPS). */
static kp_status kp__copy_out(kp__remote *r, kp_stream_t s, kp_frame *f, kp__slot *sl) {
    kp__remote_turn_leave(r);
    kp_status st = f->bytes ? kp_memcpy_async(s, f->data, sl->buf, f->bytes) : KP_OK;
    if (st == KP_OK) st = kp_event_record(sl->ev, s);
    kp__remote_turn_back(r);
    return st;
}

static kp_status kp__source_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__remote *r = user;
    bool stop = false;
    if (!eos) return kp__error(KP_ERR_INVALID_ARG, "a remote source must be a flow's first stage");
    KP_CHECK(kp__receiver_ready(r, c, &stop));
    if (!stop) KP_CHECK(kp__recycle(r));
    if (!stop) KP_CHECK(kp__remote_wait_timed(r, c->flow, kp__frame_in, &stop, &r->wait_ns));
    if (stop) {
        *eos = true; /* the flow is cancelled: it ends as such */
        return KP_OK;
    }
    kp__slot *sl = &r->slots[r->next % r->n_slots];
    if (!kp__remote_slot_ended(sl)) { /* end of stream: all of it is here */
        if (r->eos_total != r->next)
            return kp__error(KP_ERR_PARSE, "remote %s: end of stream at %llu frames, %llu came",
                             r->addr, (unsigned long long)r->eos_total,
                             (unsigned long long)r->next);
        KP_CHECK(kp__remote_ctrl(r, KP__C_DONE, r->next));
        *eos = true;
        return KP_OK;
    }
    KP_CHECK(kp__check_frame(r, sl, f));
    if (r->trade) {
        /* the frame leaves in the buffer its bytes landed in; its old one,
         * once no earlier work reads it, takes the receive `capacity` on */
        KP_CHECK(kp__remote_device_sync(r, c->stream, NULL));
        kp__frame_trade(f, &sl->pbuf);
        sl->buf = kp_buffer_data(sl->pbuf);
        sl->hdr_op.done = sl->data_op.done = false;
        KP_CHECK(kp__post_frame(r, r->next + r->capacity));
        r->consumed = ++r->next;
        KP_CHECK(kp__credit(r, false));
    } else {
        /* CUDA IPC: after the sender's copy into the slot */
        if (r->ipc) {
            KP_CHECK(kp__ipc_copied(r, c->flow, r->ipc_ev[r->next % r->n_slots], &stop));
            if (stop) {
                *eos = true;
                return KP_OK;
            }
        }
        KP_CHECK(kp__copy_out(r, c->stream, f, sl));
        sl->hdr_op.done = sl->data_op.done = false; /* taken: reposted once the copy is done */
        r->next++;
        /* the repost and its credit wait for the next call (or the wait
         * in it): done here, before the frame goes on, they cost the
         * frame its latency. Tried on the H100 host, 64 KiB frames on
         * cuda, four rounds alternated: p50 at 6,000 frames/s went from
         * 71-76 us to 83-97, for throughput within the runs' spread. */
    }
    atomic_fetch_add_explicit(&r->frames, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bytes, f->bytes, memory_order_relaxed);
    /* the next frame already in: this stage is the bottleneck, and wakes
     * the stage after it rather than running it too */
    kp__flow_source_backlog(c, kp__frame_in(r));
    return KP_OK;
}

/* A receiving flow stopping before its stream began: a sender connecting
 * now, or within KP__LATE_SENDER_MS, is welcomed with "cancelled" and
 * stops at once (KP_ERR_STATE) instead of trying until its timeout. */
static void kp__refuse_late_sender(kp__remote *r) {
    double until = kp__remote_ms_now() + KP__LATE_SENDER_MS;
    bool spun = false, hello_in = false;
    /* a sender already welcomed (and refused: its frames are too large)
     * has had its answer */
    while (!r->welcome.magic && r->failed == UCS_OK && kp__remote_ms_now() < until) {
        if (kp__receiver_accept(r, &hello_in) != KP_OK) break;
        if (hello_in) {
            r->welcome = (kp__welcome){.magic = KP__MAGIC,
                                       .version = KP__VERSION,
                                       .frame_bytes = r->frame_bytes,
                                       .refused = KP__REFUSED_CANCELLED};
            if (kp__remote_send(r, &r->welcome_op, &r->welcome, sizeof r->welcome,
                                KP__TAG(KP__T_WELCOME, 0)) == KP_OK)
                kp__remote_linger(r); /* until the sender has read it */
            break;
        }
        kp__remote_progress(r, &spun);
    }
    kp_clear_error();
    kp__remote_ep_close(r, false);
}

/* The receiving flow stopping early tells the sender. */
static kp_status kp__source_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__remote *r = user;
    if (why == KP_OK) {
        /* the sender closes first, once it has the DONE; a sender gone
         * quiet is not waited for long */
        double until = kp__remote_ms_now() + 5000;
        bool spun = false;
        while (!r->bye_seen && r->failed == UCS_OK && kp__remote_ms_now() < until) {
            if (kp__remote_ctrl_poll(r) != KP_OK) break;
            kp__remote_progress(r, &spun);
        }
        kp_clear_error();
        kp__remote_ep_close(r, r->failed == UCS_OK);
        return KP_OK;
    }
    /* a sender welcomed (its IPC answer still awaited) hears the cancel too */
    if (r->ready || (r->welcome.magic && !r->welcome.refused))
        kp__remote_tell_cancel(r);
    else
        kp__refuse_late_sender(r);
    return KP_OK;
}

kp_status kp__remote_source_make(const kp__remote_end *e, kp__stage_made *out) {
    return kp__remote_stage_made(e, kp__source_fn, kp__source_end, kp__recycle_waiting,
                                 kp__post_recvs, kp__receiver_away, out);
}
