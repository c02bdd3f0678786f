/* Remote queues' link, shared by both ends: UCX operations and progress,
 * control messages and credits, errors and a lost peer, the endpoint, the
 * set-up and the end of an end, and the wait every step of the protocol
 * uses. The protocol and the wire are described in remote-impl.h; the
 * progress thread, what the stages hand it and the test of an operation,
 * in remote_threads.c, which this builds on. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote-impl.h"

static kp_status kp__ucs(ucs_status_t s, const char *what) {
    return kp__error(KP_ERR_IO, "remote: %s: %s", what, ucs_status_string(s));
}

/* Progresses the worker; when nothing moved, spins a little, then sleeps
 * on its wake-up descriptor up to a millisecond (so the caller re-checks
 * the flow's cancel flag at least that often). With a progress thread,
 * the caller leaves the worker to it (two threads progressing one worker
 * only contend for its lock): it takes what completed, or sleeps until
 * the thread says something moved, up to a millisecond. */
static bool kp__poll_all(kp__remote *r);

void kp__remote_progress(kp__remote *r, bool *spun) {
    if (r->progress_on) {
        uint32_t key = kp__wake_prepare(&r->moved);
        if (kp__poll_all(r) || atomic_load(&r->failed) != UCS_OK) {
            kp__wake_cancel(&r->moved);
            return;
        }
        kp__remote_turn_leave(r); /* the link moves meanwhile */
        /* a completion due within the flow's spin costs the progress
         * thread a wake with nobody asleep, not this thread a sleep */
        if (r->flow) kp__flow_spin_while32(r->flow, &r->moved.seq, key);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += 1000000;
        dl.tv_sec += dl.tv_nsec / 1000000000;
        dl.tv_nsec %= 1000000000;
        kp__wake_wait(&r->moved, key, &dl);
        kp__remote_turn_back(r);
        kp__poll_all(r);
        return;
    }
    if (ucp_worker_progress(r->worker)) {
        while (ucp_worker_progress(r->worker)) {
        }
        *spun = false;
    } else if (!*spun) { /* spin a little before sleeping: a quick reply costs no wake-up */
        double until = kp__remote_ms_now() + 0.02;
        while (kp__remote_ms_now() < until && !ucp_worker_progress(r->worker)) {
        }
        *spun = true;
    } else if (r->efd >= 0 && ucp_worker_arm(r->worker) == UCS_OK) {
        struct pollfd p = {r->efd, POLLIN, 0};
        (void)poll(&p, 1, 1);
        *spun = false;
    }
    kp__poll_all(r);
}

/* Whether any operation completed. */
static bool kp__poll_all(kp__remote *r) {
    kp__remote_take(r); /* a completed request is freed under the worker's lock */
    bool any = kp__remote_op_poll(&r->hello_op);
    any |= kp__remote_op_poll(&r->welcome_op);
    any |= kp__remote_op_poll(&r->ctrl_op);
    any |= kp__remote_op_poll(&r->ipc_op);
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
        any |= kp__remote_op_poll(&r->ctl_send[k]);
    for (size_t k = 0; r->slots && k < r->n_slots; k++) {
        kp__slot *sl = &r->slots[k];
        if (atomic_load_explicit(&sl->state, memory_order_acquire) != KP__SLOT_OURS) continue;
        any |= kp__remote_op_poll(&sl->hdr_op);
        any |= kp__remote_op_poll(&sl->data_op);
    }
    kp__remote_give(r);
    /* slots the progress thread gave back (kp__remote_slots_away) */
    uint64_t returned = atomic_load_explicit(&r->returned, memory_order_acquire);
    any |= returned != r->returned_seen;
    r->returned_seen = returned;
    return any;
}

/* Starts op from what the nbx call returned. */
static kp_status kp__op_start(kp__op *op, ucs_status_ptr_t sp, bool recv, const char *what) {
    op->req = NULL;
    op->recv = recv;
    op->done = false;
    op->status = UCS_INPROGRESS;
    if (sp == NULL) { /* a send done at once */
        op->done = true;
        op->status = UCS_OK;
    } else if (UCS_PTR_IS_ERR(sp)) {
        op->done = true;
        op->status = UCS_PTR_STATUS(sp);
        return kp__ucs(op->status, what);
    } else {
        op->req = sp;
    }
    return KP_OK;
}

/* A send of `count` items of datatype dt (bytes, or iov entries). */
static ucs_status_t kp__post_dt(kp__remote *r, kp__op *op, const void *buf, size_t count,
                                ucp_datatype_t dt, ucp_tag_t tag) {
    ucp_request_param_t p = {0};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = dt;
    kp__remote_take(r);
    ucs_status_ptr_t sp = ucp_tag_send_nbx(r->ep, buf, count, tag, &p);
    kp__remote_give(r);
    if (kp__op_start(op, sp, false, "send") == KP_OK) return UCS_OK;
    kp_clear_error();
    ucs_status_t ok = UCS_OK;
    atomic_compare_exchange_strong(&r->failed, &ok, op->status); /* the link is down */
    return op->status;
}

ucs_status_t kp__remote_post(kp__remote *r, kp__op *op, const void *buf, size_t len,
                             ucp_tag_t tag) {
    return kp__post_dt(r, op, buf, len, ucp_dt_make_contig(1), tag);
}

ucs_status_t kp__remote_post_iov(kp__remote *r, kp__op *op, const ucp_dt_iov_t *iov, size_t n,
                                 ucp_tag_t tag) {
    return kp__post_dt(r, op, iov, n, ucp_dt_make_iov(), tag);
}

kp_status kp__remote_send(kp__remote *r, kp__op *op, const void *buf, size_t len, ucp_tag_t tag) {
    ucs_status_t s = kp__remote_post(r, op, buf, len, tag);
    return s == UCS_OK ? KP_OK : kp__remote_link_error(r, s);
}

static ucs_status_t kp__post_recv_dt(kp__remote *r, kp__op *op, void *buf, size_t count,
                                     ucp_datatype_t dt, ucp_tag_t tag, ucp_tag_t mask) {
    ucp_request_param_t p = {0};
    /* a request even when the message is here already: its size and tag
     * are read from it (kp__remote_op_poll) */
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = dt;
    memset(&op->info, 0, sizeof op->info);
    kp__remote_take(r);
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(r->worker, buf, count, tag, mask, &p);
    kp__remote_give(r);
    if (kp__op_start(op, sp, true, "receive") != KP_OK) kp_clear_error();
    return op->done ? op->status : UCS_OK;
}

ucs_status_t kp__remote_post_recv(kp__remote *r, kp__op *op, void *buf, size_t len, ucp_tag_t tag,
                                  ucp_tag_t mask) {
    return kp__post_recv_dt(r, op, buf, len, ucp_dt_make_contig(1), tag, mask);
}

ucs_status_t kp__remote_post_recv_iov(kp__remote *r, kp__op *op, ucp_dt_iov_t *iov, size_t n,
                                      ucp_tag_t tag, ucp_tag_t mask) {
    return kp__post_recv_dt(r, op, iov, n, ucp_dt_make_iov(), tag, mask);
}

kp_status kp__remote_recv(kp__remote *r, kp__op *op, void *buf, size_t len, ucp_tag_t tag,
                          ucp_tag_t mask) {
    ucs_status_t s = kp__remote_post_recv(r, op, buf, len, tag, mask);
    return s == UCS_OK ? KP_OK : kp__ucs(s, "receive");
}

void kp__remote_op_cancel(kp__remote *r, kp__op *op) {
    if (!op->req) return;
    /* a receive; a send ends with its endpoint, except one a shared-memory
     * lane was writing to a peer that was killed: UCX 1.13 ends that with
     * neither a close nor any progress (it says so, "not returned to
     * mpool", as the worker goes, which frees it) */
    ucp_request_cancel(r->worker, op->req);
    for (int i = 0; op->req && i < 100000; i++) {
        ucp_worker_progress(r->worker);
        kp__remote_op_poll(op);
    }
}

kp_status kp__remote_ctrl(kp__remote *r, int kind, uint64_t value) {
    /* credits on their own tag: the sender's progress thread takes them */
    ucp_tag_t tag = KP__TAG(kind == KP__C_CREDIT ? KP__T_CREDIT : KP__T_CTRL, 0);
    kp__op *op = NULL;
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0] && !op; k++)
        if (!r->ctl_send[k].req) op = &r->ctl_send[k];
    bool spun = false;
    while (!op && r->failed == UCS_OK) {
        kp__remote_progress(r, &spun);
        for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0] && !op; k++)
            if (!r->ctl_send[k].req) op = &r->ctl_send[k];
    }
    if (!op) return kp__remote_link_error(r, r->failed);
    op->msg[0] = (uint64_t)kind;
    op->msg[1] = value;
    return kp__remote_send(r, op, op->msg, sizeof op->msg, tag);
}

kp_status kp__remote_credit_post(kp__remote *r) {
    KP_CHECK(kp__remote_recv(r, &r->credit_op, r->credit_op.msg, sizeof r->credit_op.msg,
                             KP__TAG(KP__T_CREDIT, 0), KP__TYPE_MASK));
    /* from now on the progress thread's, where there is one */
    if (r->progress_on) atomic_store_explicit(&r->credit_away, true, memory_order_release);
    return KP_OK;
}

bool kp__remote_credit_poll(kp__remote *r) {
    bool any = false;
    kp__op *op = &r->credit_op;
    while (!atomic_load_explicit(&r->credit_bad, memory_order_relaxed) &&
           (kp__remote_op_poll(op), op->done)) {
        any = true;
        if (op->status != UCS_OK || op->length != sizeof op->msg || op->msg[0] != KP__C_CREDIT) {
            /* malformed (a peer that is not kpipe's: kp__remote_ctrl_poll
             * says so), cancelled at the end (kp__remote_free), or the
             * receive failed: the link's error, which the waits report */
            bool malformed = op->status == UCS_OK || op->status == UCS_ERR_MESSAGE_TRUNCATED;
            ucs_status_t ok = UCS_OK;
            if (!malformed && op->status != UCS_ERR_CANCELED)
                atomic_compare_exchange_strong(&r->failed, &ok, op->status);
            atomic_store_explicit(&r->credit_bad, malformed ? 1 : 2, memory_order_release);
            break;
        }
        if (op->msg[1] > atomic_load_explicit(&r->credit_in, memory_order_relaxed))
            atomic_store_explicit(&r->credit_in, op->msg[1], memory_order_release);
        (void)kp__remote_post_recv(r, op, op->msg, sizeof op->msg, KP__TAG(KP__T_CREDIT, 0),
                                   KP__TYPE_MASK); /* a failure: the op's status, seen next */
    }
    return any;
}

kp_status kp__remote_ctrl_poll(kp__remote *r) {
    if (!r->receiver && r->ready) { /* the credits, which the progress thread may take in */
        if (!r->progress_on) kp__remote_credit_poll(r);
        if (atomic_load_explicit(&r->credit_bad, memory_order_acquire) == 1)
            return kp__error(KP_ERR_PARSE, "remote %s: a malformed credit", r->addr);
        uint64_t c = atomic_load_explicit(&r->credit_in, memory_order_acquire);
        if (c > r->consumed) r->consumed = c;
    }
    while (r->ctrl_op.done) {
        if (r->ctrl_op.status != UCS_OK) return kp__ucs(r->ctrl_op.status, "a control message");
        if (r->ctrl_op.length != sizeof r->ctrl_op.msg)
            return kp__error(KP_ERR_PARSE, "remote %s: a malformed control message", r->addr);
        uint64_t v = r->ctrl_op.msg[1];
        int kind = (int)r->ctrl_op.msg[0];
        if (kind == KP__C_EOS) r->eos_seen = true, r->eos_total = v;
        if (kind == KP__C_DONE) r->done_seen = true;
        if (kind == KP__C_CANCEL) r->cancel_seen = true;
        if (kind == KP__C_BYE) r->bye_seen = true;
        if (kind == KP__C_CANCEL_SEEN) r->cancel_answered = true;
        KP_CHECK(kp__remote_recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
                                 KP__TAG(KP__T_CTRL, 0), KP__TYPE_MASK));
    }
    return KP_OK;
}

static void kp__err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
    kp__remote *r = arg;
    r->failed = status;
}

/* Why the peer is gone, by name. */
static kp_status kp__lost(kp__remote *r) {
    return kp__error(KP_ERR_IO, "remote %s: lost the peer (%s)", r->addr,
                     ucs_status_string(r->failed));
}

kp_status kp__remote_link_error(kp__remote *r, ucs_status_t s) {
    if (r->failed == UCS_OK) r->failed = s == UCS_OK ? UCS_ERR_CONNECTION_RESET : s;
    for (int i = 0; i < 16; i++) ucp_worker_progress(r->worker);
    kp__poll_all(r);
    if (kp__remote_ctrl_poll(r) != KP_OK) kp_clear_error();
    if (r->cancel_seen)
        return kp__error(KP_ERR_STATE, "remote %s: the peer cancelled the stream", r->addr);
    return kp__lost(r);
}

kp_status kp__remote_ep_create(kp__remote *r, ucp_conn_request_h req) {
    ucp_ep_params_t p = {0};
    p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = kp__err_cb;
    p.err_handler.arg = r;
    if (req) {
        p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
        p.conn_request = req;
    } else {
        p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
        p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        p.sockaddr.addr = (const struct sockaddr *)&r->sa;
        p.sockaddr.addrlen = r->sa_len;
    }
    r->failed = UCS_OK;
    ucs_status_t s = ucp_ep_create(r->worker, &p, &r->ep);
    if (s != UCS_OK) {
        r->ep = NULL;
        return kp__ucs(s, "connecting");
    }
    atomic_store(&r->ep_off, false); /* the progress thread may send on it */
    return KP_OK;
}

/* Closes one endpoint: flushed, or at once. */
static void kp__ep_close_one(kp__remote *r, ucp_ep_h ep, bool flush) {
    ucp_request_param_t p = {0};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
    if (sp && !UCS_PTR_IS_ERR(sp)) {
        double until = kp__remote_ms_now() + 2000;
        while (ucp_request_check_status(sp) == UCS_INPROGRESS && kp__remote_ms_now() < until)
            ucp_worker_progress(r->worker);
        if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(r->worker, sp);
        ucp_request_free(sp);
    }
}

void kp__remote_ep_close(kp__remote *r, bool flush) {
    if (!r->ep) return;
    atomic_store(&r->ep_off, true);
    while (atomic_load(&r->ep_busy)) kp__pause(); /* a send of the progress thread's */
    flush = flush && r->failed == UCS_OK;
    kp__ep_close_one(r, r->ep, flush); /* the lane first: its last words leave */
    if (r->watch) kp__ep_close_one(r, r->watch, flush);
    r->ep = r->watch = NULL;
}

static void kp__conn_cb(ucp_conn_request_h req, void *arg) {
    kp__remote *r = arg;
    ucp_conn_request_h none = NULL;
    if (atomic_load(&r->accepted) || !atomic_compare_exchange_strong(&r->pending, &none, req))
        ucp_listener_reject(r->listener, req); /* one sender per remote source */
}

/* Takes in what the peer sent that nobody will receive now (frames after
 * a cancel): UCX would otherwise hold them, and complain, at the end. */
static void kp__drain_unexpected(kp__remote *r) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    double until = kp__remote_ms_now() + 1000; /* all of it: a gone peer's data never comes */
    for (int n = 0; n < 4096 && kp__remote_ms_now() < until &&
                    (msg = ucp_tag_probe_nb(r->worker, 0, 0, 1, &info));
         n++) {
        void *scratch = info.length ? malloc(info.length) : NULL;
        if (info.length && !scratch) return;
        ucp_request_param_t p = {0};
        p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(r->worker, scratch, info.length, msg, &p);
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS && kp__remote_ms_now() < until)
                ucp_worker_progress(r->worker);
            if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(r->worker, sp);
            ucp_request_free(sp);
        }
        free(scratch);
    }
}

void kp__remote_free(void *p) {
    kp__remote *r = p;
    if (!r) return;
    kp__remote_progress_stop(r);
    if (r->worker) {
        /* the endpoints first: a send still in flight on a lane (no peer
         * error handling: a killed peer never fails it) ends as the lane
         * closes, and is freed below */
        kp__remote_ep_close(r, false);
        for (size_t k = 0; r->slots && k < r->n_slots; k++) {
            kp__remote_op_cancel(r, &r->slots[k].hdr_op);
            kp__remote_op_cancel(r, &r->slots[k].data_op);
        }
        kp__remote_op_cancel(r, &r->ctrl_op);
        kp__remote_op_cancel(r, &r->credit_op);
        kp__remote_op_cancel(r, &r->hello_op);
        kp__remote_op_cancel(r, &r->welcome_op);
        kp__remote_op_cancel(r, &r->ipc_op);
        for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
            kp__remote_op_cancel(r, &r->ctl_send[k]);
        kp__drain_unexpected(r);
        ucp_conn_request_h req = atomic_exchange(&r->pending, NULL);
        if (req) ucp_listener_reject(r->listener, req);
        if (r->listener) ucp_listener_destroy(r->listener);
        ucp_worker_destroy(r->worker);
    }
    if (r->ctx) ucp_cleanup(r->ctx);
    for (size_t k = 0; r->slots && k < r->n_slots; k++) {
        kp_event_destroy(r->slots[k].ev);
        if (r->slots[k].pbuf)
            kp_buffer_release(r->slots[k].pbuf);
        else if (r->ipc || !r->slots[k].buf)
            ; /* the IPC slots' one allocation (kp__ipc_free), or none */
        else if (r->direct)
            kp_free(r->dev, r->slots[k].buf);
        else
            kp_free_host(r->dev, r->slots[k].buf);
    }
    kp__ipc_free(r);
    if (r->lane_file[0]) unlink(r->lane_file); /* the published address (remote_lane.c) */
    kp__free(r->slots);
    kp__free(r);
}

/* UCX's context for the end: its configuration read, with a keepalive
 * and a rendezvous size of kpipe's unless the user set them. */
static kp_status kp__remote_context(kp__remote *r) {
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) return kp__ucs(s, "reading UCX's configuration");
    /* a peer that vanished without a word (a killed process on shared
     * memory) is found within seconds, unless the user set otherwise */
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) (void)ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s");
    if (!getenv("UCX_RNDV_THRESH")) (void)ucp_config_modify(cfg, "RNDV_THRESH", KP__RNDV_THRESH);
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP};
    s = ucp_init(&p, cfg, &r->ctx);
    ucp_config_release(cfg);
    return s == UCS_OK ? KP_OK : kp__ucs(s, "starting UCX");
}

/* The end's worker, for the stage's thread (or one carrying a frame into
 * it) and the progress thread, and whether frames go from and to device
 * memory directly. */
static kp_status kp__remote_worker(kp__remote *r) {
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(r->dev, &caps));
    /* UCX's CUDA support takes CUDA device pointers: the device's memory
     * must be that, whatever its backend is called */
    ucp_context_attr_t a = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    r->direct = ucp_context_query(r->ctx, &a) == UCS_OK &&
                (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) && caps.device_memory &&
                caps.native_api && strcmp(caps.native_api, "cuda") == 0;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_MULTI};
    ucs_status_t s = ucp_worker_create(r->ctx, &wp, &r->worker);
    if (s != UCS_OK) return kp__ucs(s, "making a UCX worker");
    if (ucp_worker_get_efd(r->worker, &r->efd) != UCS_OK) r->efd = -1;
    return KP_OK;
}

/* The receiver's listener, from now on, for the one sender; r->addr
 * then has the port the system chose where it was given 0. */
static kp_status kp__remote_listen(kp__remote *r) {
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (const struct sockaddr *)&r->sa, .addrlen = r->sa_len},
        .conn_handler = {.cb = kp__conn_cb, .arg = r}};
    ucs_status_t s = ucp_listener_create(r->worker, &lp, &r->listener);
    if (s != UCS_OK)
        return kp__error(KP_ERR_IO, "remote: cannot listen on %s: %s", r->addr,
                         ucs_status_string(s));
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if (ucp_listener_query(r->listener, &la) == UCS_OK) {
        const struct sockaddr *sa = (const struct sockaddr *)&la.sockaddr;
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (sa->sa_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
            port = ntohs(in->sin_port);
        } else {
            const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)sa;
            inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
            port = ntohs(in->sin6_port);
        }
        snprintf(r->addr, sizeof r->addr, "%s:%d", host, port);
    }
    atomic_store(&r->credits, r->capacity);
    return KP_OK;
}

/* A progress thread where UCX was built with threads; a UCX built without
 * gets none: its stage's thread alone moves the link, and a frame leaves
 * before the next. */
static kp_status kp__remote_progress_if_threads(kp__remote *r) {
    ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
    if (ucp_worker_query(r->worker, &wa) != UCS_OK || wa.thread_mode != UCS_THREAD_MODE_MULTI)
        return KP_OK;
    return kp__remote_progress_start(r);
}

/* An end as remote_end.c checked it: UCX's context and worker, the
 * receiver's listener, the progress thread. */
static kp_status kp__remote_new(const kp__remote_end *e, kp__remote_post_fn post_slot,
                                bool (*away)(kp__remote *r), kp__remote **out) {
    kp__remote *r = kp__calloc(1, sizeof *r);
    if (!r) return kp__error(KP_ERR_OUT_OF_MEMORY, "remote: no memory");
    r->receiver = e->receiver;
    r->dev = e->dev;
    r->frame_bytes = e->frame_bytes;
    r->capacity = e->capacity;
    r->timeout_ms = e->timeout_ms;
    r->efd = -1;
    r->post_slot = post_slot;
    atomic_store(&r->ep_off, true); /* no endpoint yet */
    r->away = away;                 /* before the progress thread starts */
    r->sa = e->sa;
    r->sa_len = e->sa_len;
    snprintf(r->addr, sizeof r->addr, "%s", e->addr);
    r->ctrl_op.done = r->hello_op.done = r->welcome_op.done = false;
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
        r->ctl_send[k].done = true;
    kp_status st = kp__remote_context(r);
    if (st == KP_OK) st = kp__remote_worker(r);
    if (st == KP_OK && r->receiver) st = kp__remote_listen(r);
    if (st == KP_OK) st = kp__remote_progress_if_threads(r);
    if (st != KP_OK) {
        kp__remote_free(r);
        return st;
    }
    *out = r;
    return KP_OK;
}

/* Whether every small send (control messages, the welcome) has left. */
static bool kp__words_sent(const kp__remote *r) {
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
        if (r->ctl_send[k].req) return false;
    return !r->welcome_op.req;
}

void kp__remote_linger(kp__remote *r) {
    double until = kp__remote_ms_now() + 1000;
    bool spun = false;
    while (r->failed == UCS_OK && !r->cancel_answered && kp__remote_ms_now() < until) {
        if (kp__remote_ctrl_poll(r) != KP_OK) break;
        if (r->cancel_seen) {
            if (kp__remote_ctrl(r, KP__C_CANCEL_SEEN, 0) == KP_OK)
                while (r->failed == UCS_OK && !kp__words_sent(r) && kp__remote_ms_now() < until)
                    kp__remote_progress(r, &spun);
            break;
        }
        kp__remote_progress(r, &spun);
    }
    kp_clear_error();
}

void kp__remote_tell_cancel(kp__remote *r) {
    if (r->ep && r->failed == UCS_OK) {
        if (!r->cancel_seen && (r->ready || !r->receiver || r->welcome.magic) &&
            kp__remote_ctrl(r, KP__C_CANCEL, 0) == KP_OK)
            kp__remote_linger(r);
        else if (r->cancel_seen)
            kp__remote_linger(r); /* answers at once */
    }
    kp__remote_ep_close(r, false);
    kp_clear_error();
}

/* An end's stage and end functions as the flow calls them: the worker
 * the receiving stage's thread's for the turn (kp__remote_turn_leave). */
static kp_status kp__remote_turn_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__remote *r = user;
    kp__remote_turn_back(r);
    kp_status st = r->fn(user, c, f, eos);
    kp__remote_turn_leave(r);
    return st;
}

static kp_status kp__remote_turn_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__remote *r = user;
    kp__remote_turn_back(r);
    kp_status st = r->end_fn(user, c, why);
    kp__remote_turn_leave(r);
    return st;
}

kp_status kp__remote_stage_made(const kp__remote_end *e, kp_flow_stage_fn fn, kp_flow_end_fn end_fn,
                                kp_status (*serve)(kp__remote *r), kp__remote_post_fn post_slot,
                                bool (*away)(kp__remote *r), kp__stage_made *out) {
    /* how the flow sees an end: one link, figures to report */
    const kp__stage_kind kind = {
        .fn = kp__remote_turn_fn, .one_link = true, .remote_stats = kp__remote_stats};
    KP_CHECK(kp__stage_kind_add(&kind));
    kp__remote *r = NULL; /* set by kp__remote_new; gcc 12 cannot see it */
    KP_CHECK(kp__remote_new(e, post_slot, away, &r));
    r->serve = serve;
    r->fn = fn;
    r->end_fn = end_fn;
    *out = (kp__stage_made){.fn = kp__remote_turn_fn,
                            .user = r,
                            .free_fn = kp__remote_free,
                            .frame_bytes = e->receiver ? e->frame_bytes : 0,
                            .max_batch = 1,
                            .end_fn = kp__remote_turn_end};
    return KP_OK;
}

/* A remote end's figures, for kp_flow_remote: from any thread. */
kp_status kp__remote_stats(void *user, kp_flow_remote_stats *out) {
    kp__remote *r = user;
    snprintf(out->address, sizeof out->address, "%s", r->addr);
    out->receiver = r->receiver;
    out->direct = r->direct;
    out->capacity = (size_t)atomic_load(&r->credits);
    out->frames = atomic_load(&r->frames);
    out->bytes = atomic_load(&r->bytes);
    out->max_in_flight = atomic_load(&r->max_in_flight);
    out->credit_waits = atomic_load(&r->credit_waits);
    out->zero_copy = atomic_load(&r->zero_copy);
    out->max_on_wire = atomic_load(&r->max_on_wire);
    out->handed = atomic_load(&r->handed);
    out->wait_ns = atomic_load(&r->wait_ns);
    out->ipc_wait_ns = atomic_load(&r->ipc_wait_ns);
    /* set once before the stream begins (r->ready), read after */
    snprintf(out->lane, sizeof out->lane, "%s", atomic_load(&r->lane_set) ? r->lane : "");
    return KP_OK;
}

kp_status kp__remote_ended(kp__remote *r, kp_flow_t flow, bool *stop) {
    if (r->cancel_seen)
        return kp__error(KP_ERR_STATE, "remote %s: the peer cancelled the stream", r->addr);
    if (r->failed != UCS_OK) return kp__remote_link_error(r, r->failed);
    *stop = kp_flow_cancelled(flow);
    return KP_OK;
}

kp_status kp__remote_wait(kp__remote *r, kp_flow_t flow, bool (*cond)(const kp__remote *),
                          bool *stop) {
    bool spun = false;
    *stop = false;
    r->flow = flow;
    for (;;) {
        KP_CHECK(kp__remote_ctrl_poll(r));
        if (cond(r)) return KP_OK;
        if (r->serve) {
            KP_CHECK(r->serve(r)); /* the receiver's credits, which the sender waits for */
            if (cond(r)) return KP_OK;
        }
        KP_CHECK(kp__remote_ended(r, flow, stop));
        if (*stop) return KP_OK;
        kp__remote_progress(r, &spun);
    }
}

kp_status kp__remote_wait_timed(kp__remote *r, kp_flow_t flow, bool (*cond)(const kp__remote *),
                                bool *stop, _Atomic uint64_t *ns) {
    *stop = false;
    KP_CHECK(kp__remote_ctrl_poll(r)); /* as kp__remote_wait's first turn */
    if (cond(r)) return KP_OK;
    const uint64_t t0 = kp__remote_ns_now();
    kp_status st = kp__remote_wait(r, flow, cond, stop);
    atomic_fetch_add_explicit(ns, kp__remote_ns_now() - t0, memory_order_relaxed);
    return st;
}
