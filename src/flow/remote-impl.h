/* Remote queues: a flow's sink sends its frames over UCX to another
 * process's (or host's) flow, whose source receives them.
 *
 *   sender:   {"name": "tx", "sink": "remote", "connect": "10.0.0.2:13337"}
 *   receiver: {"name": "rx", "source": "remote", "listen": "0.0.0.0:13337",
 *              "frame_bytes": 4194304, "capacity": 4}
 *
 * The wire, over UCX's tagged messages on one endpoint (a tag is a type in
 * its top byte and a value below):
 *   HELLO    sender -> receiver, once: magic, version, the sender's frame size
 *   WELCOME  receiver -> sender, once: capacity and frame size, or a refusal
 *   HDR|seq  a frame's sequence number, bytes, descriptor and user words
 *   DATA|seq its bytes (a message even when empty)
 *   CTRL     kind and value: CREDIT n (the receiver has consumed n frames), EOS n (the
 *            stream had n frames), DONE|n (the receiver got all n),
 *            CANCEL (either way), BYE (the sender closes first, after DONE: a
 *            receiver closing first could cut DONE off)
 * The receiver posts the receives for frames next .. next + capacity - 1,
 * each into its own slot (pinned host memory), and reposts a slot once its
 * frame's copy to the device has completed; the sender sends frame s only
 * while s < consumed + capacity, so no more than `capacity` frames are ever
 * in flight and a slow receiving flow holds the sender back.
 *
 * Frames travel through pinned host buffers: the sender copies a frame
 * into a slot and sends from there; the receiver copies from its slot into
 * the frame. Where UCX was built with CUDA support and the flow runs on
 * cuda, the slots are device memory and UCX moves them directly.
 *
 * A lost peer (its process killed, the link down) fails the stage that
 * sees it, through UCX's peer error handling; nothing waits forever for a
 * peer that is gone, and every wait also ends when the flow is cancelled. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#include "flow-impl.h"

#define KP__MAGIC 0x6b707271u /* "kprq" */
#define KP__VERSION 1u

enum { KP__T_HELLO = 1, KP__T_WELCOME = 2, KP__T_HDR = 3, KP__T_DATA = 4, KP__T_CTRL = 5 };
enum {
    KP__C_CREDIT = 1,
    KP__C_EOS = 2,
    KP__C_DONE = 3,
    KP__C_CANCEL = 4,
    KP__C_BYE = 5,
    KP__C_CANCEL_SEEN = 6, /* the answer to a CANCEL: its sender may close now */
};
/* Why a welcome refuses the sender: its frames are too large, or the
 * receiving flow was cancelled before the stream began. */
enum { KP__REFUSED_SIZE = 1, KP__REFUSED_CANCELLED = 2 };

/* How long a receiving flow cancelled before its sender arrived keeps
 * listening, so that a sender already connecting hears "cancelled" rather
 * than nothing (it would otherwise try until its timeout). */
#define KP__LATE_SENDER_MS 500

#define KP__TYPE_MASK ((ucp_tag_t)0xff << 56)
#define KP__TAG(type, v) (((ucp_tag_t)(type) << 56) | ((ucp_tag_t)(v) & ~KP__TYPE_MASK))

typedef struct kp__hello {
    uint32_t magic, version;
    uint64_t frame_bytes;
} kp__hello;

typedef struct kp__welcome {
    uint32_t magic, version;
    uint64_t capacity, frame_bytes;
    uint32_t refused; /* KP__REFUSED_*: why the receiver takes no frames; 0: it does */
    uint32_t pad_;
} kp__welcome;

/* A frame's header on the wire. */
typedef struct kp__wire {
    uint64_t seq, bytes;
    int32_t dtype, ndim;
    int64_t shape[KP_MAX_DIMS], strides[KP_MAX_DIMS], offset;
    int64_t user[4];
} kp__wire;

/* One UCX operation in flight (a request), or done. */
typedef struct kp__op {
    void *req;
    bool done;
    ucs_status_t status;
    size_t length;            /* received */
    ucp_tag_recv_info_t info; /* a receive's size and tag */
    bool recv;
    uint64_t msg[2]; /* a control message: kind and value */
} kp__op;

typedef struct kp__slot {
    void *buf; /* frame_bytes of pinned host (or, direct, device) memory */
    kp__wire hdr;
    kp__op hdr_op, data_op;
    kp_event_t ev; /* receiver: its copy into the frame */
} kp__slot;

typedef struct kp__remote {
    bool receiver;
    kp_device_t dev;
    char addr[128]; /* as given; the receiver's with the port it got */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    size_t capacity, frame_bytes;
    int timeout_ms;
    bool direct;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_listener_h listener;
    ucp_conn_request_h pending; /* a connection request not yet taken */
    ucp_ep_h ep;
    int efd;
    ucs_status_t failed; /* the endpoint's error, UCS_OK while it works */
    bool ready;          /* the hello and welcome are through */
    kp__hello hello;
    kp__welcome welcome;
    kp__op hello_op, welcome_op, ctrl_op;
    kp__op ctl_send[8]; /* small control sends in flight */
    size_t n_ctl;
    kp__slot *slots;
    uint64_t sent, consumed; /* sender: frames sent; the receiver's last credit */
    uint64_t next;           /* receiver: the next frame; consumed: slots reposted */
    bool eos_seen, cancel_seen, done_seen, bye_seen, cancel_answered;
    /* optional: work an end does each time round a wait (the receiver
     * reposts slots and gives credits back while it waits) */
    kp_status (*serve)(struct kp__remote *r);
    uint64_t eos_total;
    /* figures, read by kp_flow_remote from any thread */
    _Atomic uint64_t frames, bytes, max_in_flight, credit_waits, credits;
} kp__remote;

/* --- errors and waiting ------------------------------------------------------------ */
static kp_status kp__ucs(ucs_status_t s, const char *what) {
    return kp__error(KP_ERR_IO, "remote: %s: %s", what, ucs_status_string(s));
}

static double kp__ms_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Progresses the worker; when nothing moved, spins a little, then sleeps
 * on its wake-up descriptor up to a millisecond (so the caller re-checks
 * the flow's cancel flag at least that often). */
static void kp__poll_all(kp__remote *r);

static void kp__progress(kp__remote *r, bool *spun) {
    if (ucp_worker_progress(r->worker)) {
        while (ucp_worker_progress(r->worker)) {
        }
        *spun = false;
    } else if (!*spun) { /* spin a little before sleeping: a quick reply costs no wake-up */
        double until = kp__ms_now() + 0.02;
        while (kp__ms_now() < until && !ucp_worker_progress(r->worker)) {
        }
        *spun = true;
    } else if (r->efd >= 0 && ucp_worker_arm(r->worker) == UCS_OK) {
        struct pollfd p = {r->efd, POLLIN, 0};
        (void)poll(&p, 1, 1);
        *spun = false;
    }
    kp__poll_all(r);
}

/* --- operations ------------------------------------------------------------------- */
/* Operations run without completion callbacks: a request is tested after
 * each progress (kp__poll_all) and freed once it completes, so what a
 * receive got is read from the request itself whichever way it finished. */
static void kp__op_poll(kp__op *op) {
    if (!op->req) return;
    ucs_status_t s = op->recv ? ucp_tag_recv_request_test(op->req, &op->info)
                              : ucp_request_check_status(op->req);
    if (s == UCS_INPROGRESS) return;
    op->status = s;
    if (op->recv && s == UCS_OK) op->length = op->info.length;
    ucp_request_free(op->req);
    op->req = NULL;
    op->done = true;
}

static void kp__poll_all(kp__remote *r) {
    kp__op_poll(&r->hello_op);
    kp__op_poll(&r->welcome_op);
    kp__op_poll(&r->ctrl_op);
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
        kp__op_poll(&r->ctl_send[k]);
    for (size_t k = 0; r->slots && k < r->capacity; k++) {
        kp__op_poll(&r->slots[k].hdr_op);
        kp__op_poll(&r->slots[k].data_op);
    }
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

static kp_status kp__link_error(kp__remote *r, ucs_status_t s);

static kp_status kp__send(kp__remote *r, kp__op *op, const void *buf, size_t len, ucp_tag_t tag) {
    ucp_request_param_t p = {0};
    if (kp__op_start(op, ucp_tag_send_nbx(r->ep, buf, len, tag, &p), false, "send") == KP_OK)
        return KP_OK;
    kp_clear_error();
    return kp__link_error(r, op->status);
}

static kp_status kp__recv(kp__remote *r, kp__op *op, void *buf, size_t len, ucp_tag_t tag,
                          ucp_tag_t mask) {
    ucp_request_param_t p = {0};
    /* a request even when the message is here already: its size and tag
     * are read from it (kp__op_poll) */
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    memset(&op->info, 0, sizeof op->info);
    return kp__op_start(op, ucp_tag_recv_nbx(r->worker, buf, len, tag, mask, &p), true, "receive");
}

/* Cancels an operation still in flight and waits for it to finish. */
static void kp__op_cancel(kp__remote *r, kp__op *op) {
    if (!op->req) return;
    ucp_request_cancel(r->worker, op->req);
    for (int i = 0; op->req && i < 100000; i++) {
        ucp_worker_progress(r->worker);
        kp__op_poll(op);
    }
}

/* A control message (its value in the tag, no payload). Sends complete
 * quickly; a full set of them is waited for. */
static kp_status kp__ctrl(kp__remote *r, int kind, uint64_t value) {
    kp__op *op = NULL;
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0] && !op; k++)
        if (!r->ctl_send[k].req) op = &r->ctl_send[k];
    bool spun = false;
    while (!op && r->failed == UCS_OK) {
        kp__progress(r, &spun);
        for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0] && !op; k++)
            if (!r->ctl_send[k].req) op = &r->ctl_send[k];
    }
    if (!op) return kp__link_error(r, r->failed);
    op->msg[0] = (uint64_t)kind;
    op->msg[1] = value;
    return kp__send(r, op, op->msg, sizeof op->msg, KP__TAG(KP__T_CTRL, 0));
}

/* Takes the control messages received so far, and posts the next receive. */
static kp_status kp__ctrl_poll(kp__remote *r) {
    while (r->ctrl_op.done) {
        if (r->ctrl_op.status != UCS_OK) return kp__ucs(r->ctrl_op.status, "a control message");
        if (r->ctrl_op.length != sizeof r->ctrl_op.msg)
            return kp__error(KP_ERR_PARSE, "remote %s: a malformed control message", r->addr);
        uint64_t v = r->ctrl_op.msg[1];
        int kind = (int)r->ctrl_op.msg[0];
        if (kind == KP__C_CREDIT && v > r->consumed) r->consumed = v;
        if (kind == KP__C_EOS) r->eos_seen = true, r->eos_total = v;
        if (kind == KP__C_DONE) r->done_seen = true;
        if (kind == KP__C_CANCEL) r->cancel_seen = true;
        if (kind == KP__C_BYE) r->bye_seen = true;
        if (kind == KP__C_CANCEL_SEEN) r->cancel_answered = true;
        KP_CHECK(kp__recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
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

/* An operation on the link failed: the peer cancelled the stream (its
 * word may be in already) or is gone. */
static kp_status kp__link_error(kp__remote *r, ucs_status_t s) {
    if (r->failed == UCS_OK) r->failed = s == UCS_OK ? UCS_ERR_CONNECTION_RESET : s;
    for (int i = 0; i < 16; i++) ucp_worker_progress(r->worker);
    kp__poll_all(r);
    if (kp__ctrl_poll(r) != KP_OK) kp_clear_error();
    if (r->cancel_seen)
        return kp__error(KP_ERR_STATE, "remote %s: the peer cancelled the stream", r->addr);
    return kp__lost(r);
}

static kp_status kp__ep_create(kp__remote *r, ucp_conn_request_h req) {
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
    return KP_OK;
}

/* Closes the endpoint: flushed when the stream ended well, else at once. */
static void kp__ep_close(kp__remote *r, bool flush) {
    if (!r->ep) return;
    ucp_request_param_t p = {0};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flush && r->failed == UCS_OK ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(r->ep, &p);
    if (sp && !UCS_PTR_IS_ERR(sp)) {
        double until = kp__ms_now() + 2000;
        while (ucp_request_check_status(sp) == UCS_INPROGRESS && kp__ms_now() < until)
            ucp_worker_progress(r->worker);
        if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(r->worker, sp);
        ucp_request_free(sp);
    }
    r->ep = NULL;
}

/* --- set-up ---------------------------------------------------------------------- */
static void kp__conn_cb(ucp_conn_request_h req, void *arg) {
    kp__remote *r = arg;
    if (r->pending || r->ep) { /* one sender per remote source */
        ucp_listener_reject(r->listener, req);
        return;
    }
    r->pending = req;
}

/* Takes in what the peer sent that nobody will receive now (frames after
 * a cancel): UCX would otherwise hold them, and complain, at the end. */
static void kp__drain_unexpected(kp__remote *r) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    double until = kp__ms_now() + 1000; /* all of it: a gone peer's data never comes */
    for (int n = 0;
         n < 4096 && kp__ms_now() < until && (msg = ucp_tag_probe_nb(r->worker, 0, 0, 1, &info));
         n++) {
        void *scratch = info.length ? malloc(info.length) : NULL;
        if (info.length && !scratch) return;
        ucp_request_param_t p = {0};
        p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(r->worker, scratch, info.length, msg, &p);
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS && kp__ms_now() < until)
                ucp_worker_progress(r->worker);
            if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(r->worker, sp);
            ucp_request_free(sp);
        }
        free(scratch);
    }
}

static void kp__remote_free(void *p) {
    kp__remote *r = p;
    if (!r) return;
    if (r->worker) {
        for (size_t k = 0; r->slots && k < r->capacity; k++) {
            kp__op_cancel(r, &r->slots[k].hdr_op);
            kp__op_cancel(r, &r->slots[k].data_op);
        }
        kp__op_cancel(r, &r->ctrl_op);
        kp__op_cancel(r, &r->hello_op);
        kp__op_cancel(r, &r->welcome_op);
        for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
            kp__op_cancel(r, &r->ctl_send[k]);
        kp__ep_close(r, false);
        kp__drain_unexpected(r);
        if (r->pending) ucp_listener_reject(r->listener, r->pending);
        if (r->listener) ucp_listener_destroy(r->listener);
        ucp_worker_destroy(r->worker);
    }
    if (r->ctx) ucp_cleanup(r->ctx);
    for (size_t k = 0; r->slots && k < r->capacity; k++) {
        kp_event_destroy(r->slots[k].ev);
        if (r->direct)
            kp_free(r->dev, r->slots[k].buf);
        else
            kp_free_host(r->dev, r->slots[k].buf);
    }
    kp__free(r->slots);
    kp__free(r);
}

/* The slots: the receiver's at creation, the sender's once the welcome
 * has said how many. */
static kp_status kp__make_slots(kp__remote *r) {
    if (!(r->slots = kp__calloc(r->capacity, sizeof *r->slots)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote: no memory for its slots");
    for (size_t k = 0; k < r->capacity; k++) {
        kp__slot *sl = &r->slots[k];
        sl->hdr_op.done = sl->data_op.done = true;
        sl->hdr_op.status = sl->data_op.status = UCS_OK;
        if (r->frame_bytes)
            KP_CHECK(r->direct ? kp_malloc(r->dev, r->frame_bytes, &sl->buf)
                               : kp_malloc_host(r->dev, r->frame_bytes, &sl->buf));
        if (r->receiver) KP_CHECK(kp_event_create_untimed(r->dev, &sl->ev));
    }
    atomic_store(&r->credits, r->capacity);
    return KP_OK;
}

static kp_status kp__remote_new(const kp__remote_end *e, kp__remote **out) {
    kp__remote *r = kp__calloc(1, sizeof *r);
    if (!r) return kp__error(KP_ERR_OUT_OF_MEMORY, "remote: no memory");
    bool receiver = r->receiver = e->receiver;
    kp_device_t dev = r->dev = e->dev;
    const char *addr = e->addr;
    r->frame_bytes = e->frame_bytes;
    r->capacity = e->capacity;
    r->timeout_ms = e->timeout_ms;
    r->efd = -1;
    r->sa = e->sa;
    r->sa_len = e->sa_len;
    snprintf(r->addr, sizeof r->addr, "%s", addr);
    kp_status st = KP_OK;
    ucp_config_t *cfg = NULL;
    ucs_status_t s = UCS_OK;
    if (st == KP_OK && (s = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK)
        st = kp__ucs(s, "reading UCX's configuration");
    if (st == KP_OK) {
        /* a peer that vanished without a word (a killed process on shared
         * memory) is found within seconds, unless the user set otherwise */
        if (!getenv("UCX_KEEPALIVE_INTERVAL"))
            (void)ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s");
        ucp_params_t p = {0};
        p.field_mask = UCP_PARAM_FIELD_FEATURES;
        p.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
        s = ucp_init(&p, cfg, &r->ctx);
        ucp_config_release(cfg);
        if (s != UCS_OK) st = kp__ucs(s, "starting UCX");
    }
    if (st == KP_OK) {
        ucp_context_attr_t a = {0};
        a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
        r->direct = ucp_context_query(r->ctx, &a) == UCS_OK &&
                    (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
                    strcmp(kp_device_backend(dev), "cuda") == 0;
        ucp_worker_params_t wp = {0};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* made here, used by the stage's thread */
        if ((s = ucp_worker_create(r->ctx, &wp, &r->worker)) != UCS_OK)
            st = kp__ucs(s, "making a UCX worker");
    }
    if (st == KP_OK && ucp_worker_get_efd(r->worker, &r->efd) != UCS_OK) r->efd = -1;
    if (st == KP_OK && receiver) {
        ucp_listener_params_t lp = {0};
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = (const struct sockaddr *)&r->sa;
        lp.sockaddr.addrlen = r->sa_len;
        lp.conn_handler.cb = kp__conn_cb;
        lp.conn_handler.arg = r;
        if ((s = ucp_listener_create(r->worker, &lp, &r->listener)) != UCS_OK) {
            st =
                kp__error(KP_ERR_IO, "remote: cannot listen on %s: %s", addr, ucs_status_string(s));
        } else {
            ucp_listener_attr_t la = {0};
            la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
            char host[INET6_ADDRSTRLEN] = "?";
            if (ucp_listener_query(r->listener, &la) == UCS_OK) {
                const struct sockaddr *sa = (const struct sockaddr *)&la.sockaddr;
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
        }
    }
    if (st == KP_OK && receiver) st = kp__make_slots(r);
    r->ctrl_op.done = r->hello_op.done = r->welcome_op.done = false;
    for (size_t k = 0; k < sizeof r->ctl_send / sizeof r->ctl_send[0]; k++)
        r->ctl_send[k].done = true;
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

/* After a last word to the peer (a cancel, a refusal): waits, up to a
 * second, until the peer has read it: it answers a cancel (CANCEL_SEEN),
 * cancels itself (a refused sender does), or closes. Closing this side
 * first could otherwise cut the word off, or let the peer see a lost link
 * before the word. A cancel from the peer is answered here. */
static void kp__linger(kp__remote *r) {
    double until = kp__ms_now() + 1000;
    bool spun = false;
    while (r->failed == UCS_OK && !r->cancel_answered && kp__ms_now() < until) {
        if (kp__ctrl_poll(r) != KP_OK) break;
        if (r->cancel_seen) {
            if (kp__ctrl(r, KP__C_CANCEL_SEEN, 0) == KP_OK)
                while (r->failed == UCS_OK && !kp__words_sent(r) && kp__ms_now() < until)
                    kp__progress(r, &spun);
            break;
        }
        kp__progress(r, &spun);
    }
    kp_clear_error();
}

/* A flow stopping early (cancelled, failed) tells its peer, which stops
 * too, waits until the peer has read it, and closes the link: a stopped
 * flow that is not destroyed yet must not leave its peer waiting on a live
 * endpoint. A sender that has said hello but not yet read the welcome
 * tells it too: the receiver matches the word once it reads its control
 * messages. A flow the peer cancelled answers, so the peer may close. */
static void kp__tell_cancel(kp__remote *r) {
    if (r->ep && r->failed == UCS_OK) {
        if (!r->cancel_seen && (r->ready || !r->receiver) && kp__ctrl(r, KP__C_CANCEL, 0) == KP_OK)
            kp__linger(r);
        else if (r->cancel_seen)
            kp__linger(r); /* answers at once */
    }
    kp__ep_close(r, false);
    kp_clear_error();
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
    return KP_OK;
}

/* --- the sender: a sink ----------------------------------------------------------------- */
/* Connects (again and again while the receiver is not up yet, within the
 * timeout), says hello and reads the welcome. */
static kp_status kp__sender_ready(kp__remote *r, kp_flow_t flow) {
    if (r->ready) return KP_OK;
    double start = kp__ms_now();
    bool spun = false;
    for (;;) {
        if (!r->ep) {
            KP_CHECK(kp__ep_create(r, NULL));
            r->hello = (kp__hello){KP__MAGIC, KP__VERSION, r->frame_bytes};
            KP_CHECK(kp__recv(r, &r->welcome_op, &r->welcome, sizeof r->welcome,
                              KP__TAG(KP__T_WELCOME, 0), KP__TYPE_MASK));
            /* control messages from the start: a refused or cancelled
             * sender hears the receiver's answer to its cancel */
            KP_CHECK(kp__recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
                              KP__TAG(KP__T_CTRL, 0), KP__TYPE_MASK));
            KP_CHECK(
                kp__send(r, &r->hello_op, &r->hello, sizeof r->hello, KP__TAG(KP__T_HELLO, 0)));
        }
        kp__progress(r, &spun);
        if (r->welcome_op.done) break;
        if (kp_flow_cancelled(flow)) return KP_OK;
        bool late = r->timeout_ms && kp__ms_now() - start > r->timeout_ms;
        if (r->failed == UCS_ERR_REJECTED)
            return kp__error(KP_ERR_STATE,
                             "remote %s: the receiver refused the connection (it has a sender "
                             "already, or its flow has stopped)",
                             r->addr);
        if (r->failed != UCS_OK || (r->hello_op.done && r->hello_op.status != UCS_OK)) {
            if (late)
                return kp__error(KP_ERR_IO, "remote %s: no receiver within %d ms (%s)", r->addr,
                                 r->timeout_ms, ucs_status_string(r->failed));
            kp__op_cancel(r, &r->welcome_op);
            kp__op_cancel(r, &r->hello_op);
            kp__op_cancel(r, &r->ctrl_op);
            r->ctrl_op.done = false;
            kp__ep_close(r, false);
            struct timespec t = {0, 20 * 1000 * 1000};
            nanosleep(&t, NULL);
        } else if (late) {
            return kp__error(KP_ERR_IO, "remote %s: no receiver within %d ms (no answer)", r->addr,
                             r->timeout_ms);
        }
    }
    const kp__welcome *w = &r->welcome;
    if (r->welcome_op.status != UCS_OK || r->welcome_op.length != sizeof *w ||
        w->magic != KP__MAGIC || w->version != KP__VERSION)
        return kp__error(KP_ERR_PARSE,
                         "remote %s: the peer is not a kpipe remote source "
                         "(version %u)",
                         r->addr, KP__VERSION);
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
    KP_CHECK(kp__make_slots(r));
    r->ready = true;
    return KP_OK;
}

static kp_status kp__post_frame(kp__remote *r, uint64_t seq) {
    kp__slot *sl = &r->slots[seq % r->capacity];
    KP_CHECK(
        kp__recv(r, &sl->hdr_op, &sl->hdr, sizeof sl->hdr, KP__TAG(KP__T_HDR, seq), ~(ucp_tag_t)0));
    return kp__recv(r, &sl->data_op, sl->buf, r->frame_bytes, KP__TAG(KP__T_DATA, seq),
                    ~(ucp_tag_t)0);
}

/* Slots whose frames have reached the device take the receives of the
 * frames `capacity` later; the sender hears how many were consumed. */
static kp_status kp__recycle(kp__remote *r) {
    uint64_t before = r->consumed;
    while (r->consumed < r->next) {
        bool done = false;
        KP_CHECK(kp_event_query(r->slots[r->consumed % r->capacity].ev, &done));
        if (!done) break;
        KP_CHECK(kp__post_frame(r, r->consumed + r->capacity));
        r->consumed++;
    }
    return r->consumed != before ? kp__ctrl(r, KP__C_CREDIT, r->consumed) : KP_OK;
}

/* Waits until cond(r) holds, the peer is lost or cancels, or the flow is
 * cancelled (*stop). */
static kp_status kp__wait(kp__remote *r, kp_flow_t flow, bool (*cond)(const kp__remote *),
                          bool *stop) {
    bool spun = false;
    *stop = false;
    for (;;) {
        KP_CHECK(kp__ctrl_poll(r));
        if (r->serve) KP_CHECK(r->serve(r)); /* the receiver's credits, which the sender waits for */
        if (cond(r)) return KP_OK;
        if (r->cancel_seen)
            return kp__error(KP_ERR_STATE, "remote %s: the peer cancelled the stream", r->addr);
        if (r->failed != UCS_OK) return kp__link_error(r, r->failed);
        if (kp_flow_cancelled(flow)) {
            *stop = true;
            return KP_OK;
        }
        kp__progress(r, &spun);
    }
}

static bool kp__has_credit(const kp__remote *r) { return r->sent - r->consumed < r->capacity; }

static bool kp__slot_free(const kp__remote *r) {
    const kp__slot *sl = &r->slots[r->sent % r->capacity];
    return sl->hdr_op.done && sl->data_op.done;
}

static bool kp__last_sent(const kp__remote *r) {
    const kp__slot *sl = &r->slots[(r->sent - 1) % r->capacity];
    return sl->hdr_op.done && sl->data_op.done;
}

static kp_status kp__sink_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__remote *r = user;
    bool stop = false;
    if (eos) return kp__error(KP_ERR_INVALID_ARG, "a remote sink cannot be a flow's first stage");
    KP_CHECK(kp__sender_ready(r, c->flow));
    if (kp_flow_cancelled(c->flow)) return KP_OK;
    if (f->bytes > r->frame_bytes)
        return kp__error(KP_ERR_INVALID_ARG, "remote %s: frame %llu has %zu bytes, more than %zu",
                         r->addr, (unsigned long long)f->seq, f->bytes, r->frame_bytes);
    if (!kp__has_credit(r)) atomic_fetch_add_explicit(&r->credit_waits, 1, memory_order_relaxed);
    KP_CHECK(kp__wait(r, c->flow, kp__has_credit, &stop));
    if (!stop) KP_CHECK(kp__wait(r, c->flow, kp__slot_free, &stop));
    if (stop) return KP_OK;
    kp__slot *sl = &r->slots[r->sent % r->capacity];
    if (sl->hdr_op.status != UCS_OK || sl->data_op.status != UCS_OK)
        return kp__link_error(r,
                              sl->hdr_op.status != UCS_OK ? sl->hdr_op.status : sl->data_op.status);
    if (f->bytes) {
        KP_CHECK(kp_memcpy_async(c->stream, sl->buf, f->data, f->bytes));
        KP_CHECK(kp_stream_sync(c->stream));
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
    KP_CHECK(kp__send(r, &sl->hdr_op, w, sizeof *w, KP__TAG(KP__T_HDR, r->sent)));
    KP_CHECK(kp__send(r, &sl->data_op, sl->buf, f->bytes, KP__TAG(KP__T_DATA, r->sent)));
    r->sent++;
    uint64_t in_flight = r->sent - r->consumed;
    if (in_flight > atomic_load_explicit(&r->max_in_flight, memory_order_relaxed))
        atomic_store_explicit(&r->max_in_flight, in_flight, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->frames, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bytes, f->bytes, memory_order_relaxed);
    /* The frame leaves now: only this thread progresses the link, and it
     * may sit in the flow's queue for a long time before the next frame
     * (a large send needs the sender to answer the receiver). */
    return kp__wait(r, c->flow, kp__last_sent, &stop);
}

static bool kp__all_sent(const kp__remote *r) {
    for (size_t k = 0; k < r->capacity; k++)
        if (!r->slots[k].hdr_op.done || !r->slots[k].data_op.done) return false;
    return true;
}

static bool kp__done_seen(const kp__remote *r) { return r->done_seen; }

/* At end of stream: says how many frames there were and waits until the
 * receiver has them all. Cancelled or failed: tells the receiver. */
static kp_status kp__sink_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__remote *r = user;
    bool stop = false;
    if (why == KP_OK) {
        KP_CHECK(kp__sender_ready(r, c->flow));
        KP_CHECK(kp__wait(r, c->flow, kp__all_sent, &stop));
        if (!stop) KP_CHECK(kp__ctrl(r, KP__C_EOS, r->sent));
        if (!stop) KP_CHECK(kp__wait(r, c->flow, kp__done_seen, &stop));
        if (!stop) {
            if (kp__ctrl(r, KP__C_BYE, 0) != KP_OK) kp_clear_error(); /* all is delivered */
            kp__ep_close(r, true);
            return KP_OK;
        }
    }
    kp__tell_cancel(r);
    return KP_OK;
}

kp_status kp__remote_sink_make(const kp__remote_end *e, kp__stage_made *out) {
    /* how the flow sees the end: one link, figures to report */
    static const kp__stage_kind kind = {kp__sink_fn, true, kp__remote_stats};
    KP_CHECK(kp__stage_kind_add(&kind));
    kp__remote *r;
    KP_CHECK(kp__remote_new(e, &r));
    *out = (kp__stage_made){kp__sink_fn, NULL, r, kp__remote_free, 0, 1, kp__sink_end};
    return KP_OK;
}

/* --- the receiver: a source --------------------------------------------------------------- */
/* Takes the sender's connection and hello; welcomes it (or refuses frames
 * larger than ours) and posts the first window of receives. */
/* Takes a sender's connection request, once, and posts the receive of its
 * hello; whether the hello is in. */
static kp_status kp__receiver_accept(kp__remote *r, bool *hello_in) {
    *hello_in = false;
    if (r->pending && !r->ep) {
        ucp_conn_request_h req = r->pending;
        r->pending = NULL;
        KP_CHECK(kp__ep_create(r, req));
    }
    bool posted = r->hello_op.req || r->hello_op.done;
    if (r->ep && !posted) {
        KP_CHECK(kp__recv(r, &r->hello_op, &r->hello, sizeof r->hello, KP__TAG(KP__T_HELLO, 0),
                          KP__TYPE_MASK));
        /* control messages from the start: a sender cancelled before it read
         * the welcome says so, and hears the answer to its cancel */
        KP_CHECK(kp__recv(r, &r->ctrl_op, r->ctrl_op.msg, sizeof r->ctrl_op.msg,
                          KP__TAG(KP__T_CTRL, 0), KP__TYPE_MASK));
    }
    *hello_in = r->ep && r->hello_op.done;
    return KP_OK;
}

static kp_status kp__receiver_ready(kp__remote *r, kp_flow_t flow, bool *stop) {
    *stop = false;
    if (r->ready) return KP_OK;
    double start = kp__ms_now();
    bool spun = false, hello_in = false;
    for (;;) {
        KP_CHECK(kp__receiver_accept(r, &hello_in));
        if (hello_in) break;
        if (r->failed != UCS_OK) return kp__link_error(r, r->failed);
        if (kp_flow_cancelled(flow)) {
            *stop = true;
            return KP_OK;
        }
        if (r->timeout_ms && kp__ms_now() - start > r->timeout_ms)
            return kp__error(KP_ERR_IO, "remote %s: no sender within %d ms", r->addr,
                             r->timeout_ms);
        kp__progress(r, &spun);
    }
    const kp__hello *h = &r->hello;
    if (r->hello_op.status != UCS_OK || r->hello_op.length != sizeof *h || h->magic != KP__MAGIC ||
        h->version != KP__VERSION)
        return kp__error(KP_ERR_PARSE, "remote %s: the peer is not a kpipe remote sink", r->addr);
    r->welcome = (kp__welcome){KP__MAGIC,
                               KP__VERSION,
                               r->capacity,
                               r->frame_bytes,
                               h->frame_bytes > r->frame_bytes ? KP__REFUSED_SIZE : 0,
                               0};
    KP_CHECK(
        kp__send(r, &r->welcome_op, &r->welcome, sizeof r->welcome, KP__TAG(KP__T_WELCOME, 0)));
    if (r->welcome.refused) {
        kp__linger(r);
        return kp__error(KP_ERR_INVALID_ARG,
                         "remote %s: the sender's frames have %llu bytes, more than this "
                         "source's frame_bytes (%zu)",
                         r->addr, (unsigned long long)h->frame_bytes, r->frame_bytes);
    }
    for (uint64_t s = 0; s < r->capacity; s++) KP_CHECK(kp__post_frame(r, s));
    r->ready = true;
    return KP_OK;
}

static bool kp__frame_in(const kp__remote *r) {
    const kp__slot *sl = &r->slots[r->next % r->capacity];
    return (sl->hdr_op.done && sl->data_op.done) || (r->eos_seen && r->next >= r->eos_total);
}

/* Checks a header from the wire before anything of it is used. */
static kp_status kp__check_frame(kp__remote *r, const kp__slot *sl, kp_frame *f) {
    const kp__wire *w = &sl->hdr;
    if (sl->hdr_op.status != UCS_OK || sl->data_op.status != UCS_OK)
        return sl->hdr_op.status == UCS_ERR_MESSAGE_TRUNCATED ||
                       sl->data_op.status == UCS_ERR_MESSAGE_TRUNCATED
                   ? kp__error(KP_ERR_PARSE, "remote %s: frame %llu is larger than %zu bytes",
                               r->addr, (unsigned long long)r->next, r->frame_bytes)
                   : kp__link_error(r, sl->hdr_op.status != UCS_OK ? sl->hdr_op.status
                                                                   : sl->data_op.status);
    if (sl->hdr_op.length != sizeof *w || w->seq != r->next || w->bytes != sl->data_op.length ||
        w->bytes > f->capacity)
        return kp__error(KP_ERR_PARSE,
                         "remote %s: frame %llu: a malformed header (seq %llu, %llu bytes, "
                         "%zu received)",
                         r->addr, (unsigned long long)r->next, (unsigned long long)w->seq,
                         (unsigned long long)w->bytes, sl->data_op.length);
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

static kp_status kp__source_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__remote *r = user;
    bool stop = false;
    if (!eos) return kp__error(KP_ERR_INVALID_ARG, "a remote source must be a flow's first stage");
    KP_CHECK(kp__receiver_ready(r, c->flow, &stop));
    if (!stop) KP_CHECK(kp__recycle(r));
    if (!stop) KP_CHECK(kp__wait(r, c->flow, kp__frame_in, &stop));
    if (stop) {
        *eos = true; /* the flow is cancelled: it ends as such */
        return KP_OK;
    }
    kp__slot *sl = &r->slots[r->next % r->capacity];
    if (!(sl->hdr_op.done && sl->data_op.done)) { /* end of stream: all of it is here */
        if (r->eos_total != r->next)
            return kp__error(KP_ERR_PARSE, "remote %s: end of stream at %llu frames, %llu came",
                             r->addr, (unsigned long long)r->eos_total,
                             (unsigned long long)r->next);
        KP_CHECK(kp__ctrl(r, KP__C_DONE, r->next));
        *eos = true;
        return KP_OK;
    }
    KP_CHECK(kp__check_frame(r, sl, f));
    if (f->bytes) KP_CHECK(kp_memcpy_async(c->stream, f->data, sl->buf, f->bytes));
    KP_CHECK(kp_event_record(sl->ev, c->stream));
    sl->hdr_op.done = sl->data_op.done = false; /* taken: reposted once the copy is done */
    r->next++;
    atomic_fetch_add_explicit(&r->frames, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bytes, f->bytes, memory_order_relaxed);
    return KP_OK;
}

/* A receiving flow stopping before its stream began: a sender connecting
 * now, or within KP__LATE_SENDER_MS, is welcomed with "cancelled" and
 * stops at once (KP_ERR_STATE) instead of trying until its timeout. */
static void kp__refuse_late_sender(kp__remote *r) {
    double until = kp__ms_now() + KP__LATE_SENDER_MS;
    bool spun = false, hello_in = false;
    /* a sender already welcomed (and refused: its frames are too large)
     * has had its answer */
    while (!r->welcome.magic && r->failed == UCS_OK && kp__ms_now() < until) {
        if (kp__receiver_accept(r, &hello_in) != KP_OK) break;
        if (hello_in) {
            r->welcome =
                (kp__welcome){KP__MAGIC, KP__VERSION, 0, r->frame_bytes, KP__REFUSED_CANCELLED, 0};
            if (kp__send(r, &r->welcome_op, &r->welcome, sizeof r->welcome,
                         KP__TAG(KP__T_WELCOME, 0)) == KP_OK)
                kp__linger(r); /* until the sender has read it */
            break;
        }
        kp__progress(r, &spun);
    }
    kp_clear_error();
    kp__ep_close(r, false);
}

/* The receiving flow stopping early tells the sender. */
static kp_status kp__source_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__remote *r = user;
    if (why == KP_OK) {
        /* the sender closes first, once it has the DONE; a sender gone
         * quiet is not waited for long */
        double until = kp__ms_now() + 5000;
        bool spun = false;
        while (!r->bye_seen && r->failed == UCS_OK && kp__ms_now() < until) {
            if (kp__ctrl_poll(r) != KP_OK) break;
            kp__progress(r, &spun);
        }
        kp_clear_error();
        kp__ep_close(r, r->failed == UCS_OK);
        return KP_OK;
    }
    if (r->ready)
        kp__tell_cancel(r);
    else
        kp__refuse_late_sender(r);
    return KP_OK;
}

kp_status kp__remote_source_make(const kp__remote_end *e, kp__stage_made *out) {
    static const kp__stage_kind kind = {kp__source_fn, true, kp__remote_stats};
    KP_CHECK(kp__stage_kind_add(&kind));
    kp__remote *r;
    KP_CHECK(kp__remote_new(e, &r));
    r->serve = kp__recycle;
    *out = (kp__stage_made){kp__source_fn, NULL,           r, kp__remote_free, e->frame_bytes, 1,
                            kp__source_end};
    return KP_OK;
}
