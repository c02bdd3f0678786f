/* Remote queues (src/flow/remote/, the flow layer above the runtime and
 * the built-in stages: runtime < stages < remote < json): a flow's sink
 * sends its frames over UCX to another process's (or host's) flow, whose
 * source receives them. remote_end.c checks an end and is always built
 * (remote_end-impl.h); the link itself is remote.c (UCX's context, the
 * endpoint, control messages), remote_threads.c (the progress thread and
 * what the stages hand it), remote_tx.c (the sender) and remote_rx.c (the
 * receiver), built with UCX, which share this header.
 *
 *   sender:   {"name": "tx", "sink": "remote", "connect": "10.0.0.2:13337"}
 *   receiver: {"name": "rx", "source": "remote", "listen": "0.0.0.0:13337",
 *              "frame_bytes": 4194304, "capacity": 4}
 *
 * The wire, over UCX's tagged messages on one endpoint (a tag is a type in
 * its top byte and a value below):
 *   HELLO    sender -> receiver, once: magic, version, the sender's frame size,
 *            its host and published worker address (remote_lane.c)
 *   WELCOME  receiver -> sender, once: capacity and frame size, or a refusal;
 *            its host and address, and an offer of CUDA IPC
 *   IPC      sender -> receiver, after an offer: yes (its events) or no
 *   HDR|seq  a frame's sequence number, bytes, descriptor and user words
 *   DATA|seq its bytes (a message even when empty); where the receiver's
 *            frames pack (frame_bytes and header within KP__PACK_MAX),
 *            the header and then the bytes, one message, and no HDR
 *   CTRL     kind and value: EOS n (the stream had n frames), DONE|n (the
 *            receiver got all n), CANCEL (either way), BYE (the sender
 *            closes first, after DONE: a receiver closing first could cut
 *            DONE off)
 *   CREDIT   kind CREDIT and n: the receiver has consumed n frames (a tag of
 *            its own: the sender's progress thread takes credits in)
 * The receiver posts the receives for frames next .. next + capacity - 1,
 * each into its own slot (pinned host memory), and reposts a slot once its
 * frame's copy to the device has completed (with the spare slot of
 * n_slots, the receive of frame n + capacity takes the slot of frame
 * n - 1, whose copy is older); the sender sends frame s only
 * while s < consumed + capacity, so no more than `capacity` frames are ever
 * in flight and a slow receiving flow holds the sender back.
 *
 * Frames in flight: the sender fills a frame's slot and hands it to the
 * end's progress thread, which posts its sends and tests them until they
 * complete (kp__slot.state; where that thread sleeps, the stage's thread
 * posts the frame itself); the stage's thread goes on to the next frame
 * meanwhile. Each end has a progress thread that moves the link (the
 * worker is made for several threads) while the stage's thread waits or
 * is away; in its turn in the end's code, the stage's thread has the
 * worker to itself (kp__remote_take). The stage's thread tests only its
 * own operations; nothing waits for a frame to leave but the end of the
 * stream, a full window of credits or a slot still in flight.
 *
 * Where UCX can reach the frames' memory (host memory on the cpu backend;
 * device memory where UCX was built with CUDA support) and the flow's
 * frames have one device, nothing is copied: the slots hold buffers of the
 * flow's own pool, and a frame trades its buffer with a slot's
 * (kp__frame_trade). The sender's frame leaves with a free slot's buffer
 * while its own is on the wire; the receiver's receives land in the slots'
 * buffers ahead of time, and a frame that arrives is handed on in the
 * buffer it landed in, the frame's old buffer taking the next receive.
 * Elsewhere (cuda without UCX's CUDA support) frames travel through pinned
 * host slots: the sender copies a frame into one and sends from there, the
 * next frame's copy running while the last is on the wire; the receiver
 * copies from its slot into the frame. Each end then has one slot more
 * than the credits, so that neither copy waits for a credit nor holds one
 * back (n_slots).
 *
 * A lost peer (its process killed, the link down) fails the stage that
 * sees it, through UCX's peer error handling; nothing waits forever for a
 * peer that is gone, and every wait also ends when the flow is cancelled. */
#ifndef KPIPE_FLOW_REMOTE_IMPL_H
#define KPIPE_FLOW_REMOTE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "remote_end-impl.h"

#define KP__MAGIC 0x6b707271u /* "kprq" */
#define KP__VERSION 3u

enum {
    KP__T_HELLO = 1,
    KP__T_WELCOME = 2,
    KP__T_HDR = 3,
    KP__T_DATA = 4,
    KP__T_CTRL = 5,
    KP__T_CREDIT = 6,
    KP__T_IPC = 7
};
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

/* Where UCX switches a message from eager sends to its rendezvous (the
 * receiver asks for the bytes once the receive is matched: a round trip
 * per frame, in return for zero copy), unless UCX_RNDV_THRESH says
 * otherwise. UCX 1.13's own choice over tcp put 64 KiB frames on
 * rendezvous. Measured on the H100 host (bench_remote, eager everywhere
 * against UCX's choice, alternated twice): eager took 64 KiB frames from
 * 0.80-0.81 to 1.31-1.35 GB/s on cpu and 0.70-0.76 to 0.85-0.92 on cuda,
 * and halved their latency; 256 KiB frames 1.94-2.33 to 2.18-2.65 (cpu),
 * 1.57-1.65 to 1.97-2.18 (cuda); 1 MiB frames lost (3.64-3.94 to 2.92-3.35
 * on cpu). So messages below 512 KiB go eager. */
#define KP__RNDV_THRESH "512K"

/* Frames whose header and bytes come to at most this travel as one
 * message (kp__remote.packed), in two pieces (an iov) at both ends, so a
 * frame costs one write into the socket and one message to match, not
 * two. Below KP__RNDV_THRESH: UCX 1.13 sends an iov past its rendezvous
 * size without zero copy (remote_tx.c). */
#define KP__PACK_MAX (256u << 10)

/* Frames in flight on a shared-memory lane (no CUDA IPC offered) once
 * they are rendezvous-sized (KP__LANE_WIDE_BYTES and up): the receiver's
 * progress thread copies them out of the sender one at a time (cma), so a
 * second frame in flight keeps that copy busy, and every further one only
 * adds a buffer at each end that the host's cache must hold. Measured on
 * the H200 host (bench_remote cpu 8192, one call): 9.8 GB/s with 2 in
 * flight, 4.5-10 with 4, 4.6 with 8, against ucx_perftest's 6.9-8.9
 * moving one buffer each way (bench/RESULTS.md, "Remote queues, latest:
 * two large frames in flight on shared memory"). The receiver grants at
 * most this many credits there (kp_flow_remote_stats.capacity says so). */
#define KP__LANE_WINDOW 2
#define KP__LANE_WIDE_BYTES (512u << 10)

/* How long a receiving flow cancelled before its sender arrived keeps
 * listening, so that a sender already connecting hears "cancelled" rather
 * than nothing (it would otherwise try until its timeout). */
#define KP__LATE_SENDER_MS 500

#define KP__TYPE_MASK ((ucp_tag_t)0xff << 56)
#define KP__TAG(type, v) (((ucp_tag_t)(type) << 56) | ((ucp_tag_t)(v) & ~KP__TYPE_MASK))

/* The largest UCX worker address an end publishes (remote_lane.c). */
#define KP__ADDR_MAX 4096
/* Which host an end is on (kp__lane_host, remote_lane.c): its boot id and
 * name, so that two ends tell whether they share one. */
#define KP__HOST_BYTES 48
/* hello.flags: the sender's frames are CUDA device memory, which a
 * receiver on the same host may take through CUDA IPC (remote_lane.c) */
#define KP__HELLO_CUDA 1u

/* Both name the file holding the end's UCX worker address (lane_pid and
 * lane_nonce; 0: none), for a lane of UCX's choice between two ends of
 * one host (remote_lane.c: the address itself never crosses the link). */
typedef struct kp__hello {
    uint32_t magic, version;
    uint64_t frame_bytes;
    uint32_t flags, lane_pid;
    uint64_t lane_nonce;
    unsigned char host[KP__HOST_BYTES];
} kp__hello;

typedef struct kp__welcome {
    uint32_t magic, version;
    uint64_t capacity, frame_bytes;
    uint32_t refused; /* KP__REFUSED_*: why the receiver takes no frames; 0: it does */
    uint32_t lane_pid;
    uint64_t lane_nonce;
    unsigned char host[KP__HOST_BYTES];
    /* CUDA IPC offered (remote_lane.c): ipc_slots slots of ipc_stride bytes
     * in the receiver's device memory (one allocation, ipc_mem); 0: none */
    uint64_t ipc_slots, ipc_stride;
    kp_ipc_handle ipc_mem;
} kp__welcome;

/* The sender's answer to an IPC offer (KP__T_IPC): it took the n slots
 * (n event handles follow, one a slot), or not (n = 0): frames then
 * travel on the link. */
/* CUDA IPC's slots for `capacity` credits (remote_lane.c). */
#define KP__IPC_SLOTS(capacity) (2 * (size_t)(capacity))
typedef struct kp__ipc_reply {
    uint64_t n;
} kp__ipc_reply;

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

/* Whose a sender's slot is (kp__slot.state): the stage's thread's, with
 * its operations (OURS); filled in and handed to the progress thread to
 * post its sends (HANDED); being posted there (POSTING); on the wire, the
 * progress thread testing its sends until both complete (AWAY). A
 * receiver's slots are always OURS. */
enum { KP__SLOT_OURS = 0, KP__SLOT_HANDED = 1, KP__SLOT_POSTING = 2, KP__SLOT_AWAY = 3 };

typedef struct kp__slot {
    void *buf;        /* frame_bytes of pinned host (or, direct, device) memory */
    kp_buffer_t pbuf; /* trading frames (r->trade): the pool's buffer buf is */
    kp__wire hdr;
    uint64_t seq;           /* the frame its operations are for */
    ucp_dt_iov_t iov[2];    /* a packed frame's header and bytes (kp__remote.packed) */
    kp__op hdr_op, data_op; /* read only while the slot is OURS */
    _Atomic int state;      /* KP__SLOT_* */
    kp_event_t ev;          /* receiver: its copy into the frame */
} kp__slot;

struct kp__remote;
/* Posts a slot's two operations (the sender's sends, the receiver's
 * receives) for its frame (kp__slot.seq); from either thread. A failure
 * is the ops' status, and the link's where it is down. */
typedef ucs_status_t (*kp__remote_post_fn)(struct kp__remote *r, kp__slot *sl);

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
    bool trade; /* frames trade buffers with the slots: nothing is copied */
    /* a frame is one message (header and bytes, the data op unused), not
     * two: the receiver's frame_bytes make it at most KP__PACK_MAX */
    bool packed;
    ucp_listener_h listener;
    /* a connection request not yet taken, and whether one was: both set
     * from UCX's callbacks, on whichever thread progressed the worker */
    _Atomic(ucp_conn_request_h) pending;
    _Atomic bool accepted;
    /* where frames and words go: the endpoint made from the address, or
     * (one host) the lane made from the peer's worker address, the
     * former kept as `watch`, whose error handling sees the peer lost
     * (UCX 1.13 puts an endpoint with peer error handling on tcp only) */
    ucp_ep_h ep, watch;
    char lane[64];          /* kp_flow_remote_stats.lane */
    _Atomic bool lane_set;  /* lane (and ipc) are set: the stream began */
    /* the hello or welcome as received, with room for more: a longer
     * message is neither, and says so by its length (checked before use) */
    unsigned char peer_msg[sizeof(kp__welcome) + 64];
    char lane_file[192]; /* this end's published address (remote_lane.c), unlinked at the end */
    /* CUDA IPC (remote_lane.c): frames' bytes go device to device into
     * the receiver's slots (ipc_mem, mapped at the sender, n_slots of
     * them: KP__IPC_SLOTS), each slot's copy marked by an event of the
     * sender's (ipc_ev, opened at the receiver); only the headers travel
     * on the link */
    bool ipc;
    void *ipc_mem;
    kp_event_t *ipc_ev;
    kp__op ipc_op;
    void *ipc_msg; /* the sender's answer, ipc_msg_len bytes (at most, receiving it) */
    size_t ipc_msg_len;
    int efd;
    _Atomic ucs_status_t failed; /* the endpoint's error, UCS_OK while it works */
    /* the progress thread: moves the link while the stage's thread is
     * away, and wakes the stage's thread (moved) when anything moved */
    pthread_t progress;
    bool progress_on;
    _Atomic bool progress_stop;
    /* the stage's thread is about to call into the worker, or is in the
     * end's code: the progress thread keeps off it meanwhile
     * (kp__remote_take, remote_threads.c) */
    _Atomic uint32_t wanted;
    /* the end's own stage and end functions, which the flow calls through
     * kp__remote_turn_fn and kp__remote_turn_end (remote.c) */
    kp_flow_stage_fn fn;
    kp_flow_end_fn end_fn;
    kp__wake moved;
    /* work the progress thread does for the end each time round, with the
     * worker to itself (the sender posts the frames handed to it); whether
     * anything moved. And the thread about to sleep, or asleep: a frame
     * handed then is posted by the stage's thread itself. */
    bool (*away)(struct kp__remote *r);
    kp__remote_post_fn post_slot;
    _Atomic bool asleep;
    /* the progress thread is sending on the endpoint; the endpoint closes
     * or is closed (kp__remote_ep_enter) */
    _Atomic bool ep_busy, ep_off;
    /* sender: frames handed or posted (the stage's thread's r->sent, for
     * the progress thread), the next the progress thread looks at, and
     * its slots away; slots it gave back (and the count the stage's
     * thread has seen: kp__poll_all says a wait's condition may hold) */
    _Atomic uint64_t queued;
    uint64_t scan;
    size_t n_away;
    _Atomic uint64_t returned;
    uint64_t returned_seen;
    /* the flow whose spin the stage's thread keeps before it sleeps on
     * `moved` (its waits set it) */
    kp_flow_t flow;
    bool ready; /* the hello and welcome are through */
    kp__hello hello;
    kp__welcome welcome;
    kp__op hello_op, welcome_op, ctrl_op;
    /* sender: the credits' receive, the progress thread's once posted
     * (credit_away; kp__remote_credit_poll), the last credit it took in,
     * and 1 where a credit was malformed, 2 where the receive ended
     * otherwise (cancelled, or failed: r->failed). Receiver: the progress
     * thread's credit send */
    kp__op credit_op;
    _Atomic bool credit_away;
    _Atomic uint64_t credit_in;
    _Atomic int credit_bad;
    /* receiver: frames consumed (their slots handed back for the receives
     * `capacity` on: r->consumed, for the progress thread), a credit the
     * stage's thread wants sent now (it is about to wait), and the last
     * credit sent, by either thread */
    _Atomic uint64_t consumed_pub, credit_now, credit_out;
    kp__op ctl_send[8]; /* small control sends in flight */
    size_t n_ctl;
    kp__slot *slots;
    /* capacity, and one spare where frames are copied through the slots:
     * a frame's copy then runs while the credit it needs is on its way
     * (sender), and a receive is reposted while the last frame's copy out
     * of its slot still runs (receiver), so no copy sits in the loop of a
     * frame and its credit */
    size_t n_slots;
    uint64_t sent, consumed; /* sender: frames sent; the receiver's last credit */
    uint64_t left;           /* sender: frames before it have all left */
    uint64_t next;           /* receiver: the next frame; consumed: slots reposted */
    bool eos_seen, cancel_seen, done_seen, bye_seen, cancel_answered;
    /* optional: work an end does each time round a wait, once its
     * condition is not met (the receiver reposts slots and gives every
     * credit back while it waits) */
    kp_status (*serve)(struct kp__remote *r);
    uint64_t eos_total;
    /* figures, read by kp_flow_remote from any thread */
    _Atomic uint64_t frames, bytes, max_in_flight, credit_waits, credits, max_on_wire, handed;
    _Atomic uint64_t wait_ns, ipc_wait_ns; /* kp_flow_remote_stats' */
    _Atomic bool zero_copy;
} kp__remote;

/* --- the link, shared by both ends (remote.c; its threads, remote_threads.c) -- */
double kp__remote_ms_now(void);
/* The stage's thread wants the worker (take) and is through with it
 * (give); the progress thread keeps off it in between. Nests. */
void kp__remote_take(kp__remote *r);
void kp__remote_give(kp__remote *r);
/* A stage's thread leaving its turn's hold on the worker while it waits,
 * and taking it back: the receiving stage's only (remote_threads.c). */
void kp__remote_turn_leave(kp__remote *r);
void kp__remote_turn_back(kp__remote *r);
/* The end's progress thread (remote_threads.c): started where UCX's
 * worker is made for several threads; stopped (joined) before the end's
 * state goes. */
kp_status kp__remote_progress_start(kp__remote *r);
void kp__remote_progress_stop(kp__remote *r);
/* Waits for the device (ev, or where NULL the stream s) with the worker
 * given back meanwhile, so that the link moves. */
kp_status kp__remote_device_sync(kp__remote *r, kp_stream_t s, kp_event_t ev);
/* Moves the link or waits for it to move; in the stage's thread's turn
 * only (it gives the worker back while it waits). */
void kp__remote_progress(kp__remote *r, bool *spun);
kp_status kp__remote_send(kp__remote *r, kp__op *op, const void *buf, size_t len, ucp_tag_t tag);
/* Posts a send and nothing more: from either thread (the progress thread
 * posts handed frames); a failure is the op's status, and the link's. */
ucs_status_t kp__remote_post(kp__remote *r, kp__op *op, const void *buf, size_t len, ucp_tag_t tag);
kp_status kp__remote_recv(kp__remote *r, kp__op *op, void *buf, size_t len, ucp_tag_t tag,
                          ucp_tag_t mask);
/* Posts a receive and nothing more, from either thread: a failure is the
 * op's status. */
ucs_status_t kp__remote_post_recv(kp__remote *r, kp__op *op, void *buf, size_t len, ucp_tag_t tag,
                                  ucp_tag_t mask);
/* The same of one message in n pieces (a packed frame: its header, then
 * its bytes); the pieces live until the op ends. */
ucs_status_t kp__remote_post_iov(kp__remote *r, kp__op *op, const ucp_dt_iov_t *iov, size_t n,
                                 ucp_tag_t tag);
ucs_status_t kp__remote_post_recv_iov(kp__remote *r, kp__op *op, ucp_dt_iov_t *iov, size_t n,
                                      ucp_tag_t tag, ucp_tag_t mask);
/* Takes an operation's end, if it ended (its request freed): whether it
 * did now. */
bool kp__remote_op_poll(kp__op *op);
/* Cancels an operation still in flight and waits for it to finish. */
void kp__remote_op_cancel(kp__remote *r, kp__op *op);
/* A control message (its value in the tag, no payload). Sends complete
 * quickly; a full set of them is waited for. */
kp_status kp__remote_ctrl(kp__remote *r, int kind, uint64_t value);
/* The sender's credits: posts their receive once the stream begins, which
 * is then the progress thread's where there is one; takes those in so far
 * (kp__remote.credit_in) and posts the next receive, from that thread or
 * (without one) from kp__remote_ctrl_poll: whether any came. */
kp_status kp__remote_credit_post(kp__remote *r);
bool kp__remote_credit_poll(kp__remote *r);
/* Takes the control messages received so far (and the sender's credits),
 * and posts the next receive. */
kp_status kp__remote_ctrl_poll(kp__remote *r);
/* An operation on the link failed: the peer cancelled the stream (its
 * word may be in already) or is gone. */
kp_status kp__remote_link_error(kp__remote *r, ucs_status_t s);
kp_status kp__remote_ep_create(kp__remote *r, ucp_conn_request_h req);

/* --- lanes between two ends of one host (remote_lane.c) -------------------- */
/* This host's identity, for a hello or welcome. */
void kp__lane_host(unsigned char host[KP__HOST_BYTES]);
/* Publishes the end's worker address for a peer of this host, for its
 * hello or welcome: *pid and *nonce name it (0: lanes are off, or it
 * could not be written). */
void kp__lane_publish(kp__remote *r, uint32_t *pid, uint64_t *nonce);
/* The peer's published worker address (from its hello or welcome, on host
 * `host`): where it is on this host and UCX reaches it through shared
 * memory, frames and words go there from now on (r->ep), the first
 * endpoint kept to watch the peer (r->watch); else nothing changes.
 * r->lane says which. */
kp_status kp__lane_open(kp__remote *r, const unsigned char host[KP__HOST_BYTES], uint32_t pid,
                        uint64_t nonce);
/* Whether this end's frames are CUDA device memory that UCX does not
 * reach itself, and CUDA IPC is allowed: the frames it is for (the
 * sender's hello says so, KP__HELLO_CUDA). */
bool kp__ipc_frames(const kp__remote *r);
/* Receiver: offers CUDA IPC in the welcome where the sender's frames are
 * CUDA device memory on this host (KP__HELLO_CUDA) and so are its own;
 * the caller posts the answer's receive (r->ipc_msg, ipc_msg_len) where
 * it did (w->ipc_slots). (remote_lane.c calls nothing of remote.c, which
 * frees its state: kp__ipc_free.) */
kp_status kp__ipc_offer(kp__remote *r, const kp__hello *h, kp__welcome *w);
/* Sender: takes an offer (its slots mapped, its events made), or not; the
 * caller sends the answer (r->ipc_msg, ipc_msg_len) either way where there
 * was an offer, so the receiver hears. */
kp_status kp__ipc_take(kp__remote *r, const kp__welcome *w);
/* Receiver: reads the sender's answer (posted by kp__ipc_offer); whether it came. */
bool kp__ipc_answered(const kp__remote *r);
kp_status kp__ipc_answer(kp__remote *r);
/* The slots' IPC mappings and events, at the end. */
void kp__ipc_free(kp__remote *r);
/* Closes the endpoint: flushed when the stream ended well, else at once. */
void kp__remote_ep_close(kp__remote *r, bool flush);
void kp__remote_free(void *p);
/* The slots, once the stream begins (the sender's once the welcome has
 * said how many): buffers of the flow's pool where frames can trade with
 * them (r->trade), else pinned host (or, direct, device) memory. */
kp_status kp__remote_make_slots(kp__remote *r, const kp_stage_ctx *c);
/* After a last word to the peer (a cancel, a refusal): waits, up to a
 * second, until the peer has read it: it answers a cancel (CANCEL_SEEN),
 * cancels itself (a refused sender does), or closes. Closing this side
 * first could otherwise cut the word off, or let the peer see a lost link
 * before the word. A cancel from the peer is answered here. */
void kp__remote_linger(kp__remote *r);
/* A flow stopping early (cancelled, failed) tells its peer, which stops
 * too, waits until the peer has read it, and closes the link: a stopped
 * flow that is not destroyed yet must not leave its peer waiting on a live
 * endpoint. A sender that has said hello but not yet read the welcome
 * tells it too: the receiver matches the word once it reads its control
 * messages. A flow the peer cancelled answers, so the peer may close. */
void kp__remote_tell_cancel(kp__remote *r);
/* Why a wait must end, its control messages read: the peer cancelled
 * (KP_ERR_STATE), the link failed (its error), or the flow is cancelled
 * (*stop); KP_OK and *stop false: none. */
kp_status kp__remote_ended(kp__remote *r, kp_flow_t flow, bool *stop);
/* Waits until cond(r) holds, the peer is lost or cancels, or the flow is
 * cancelled (*stop). */
kp_status kp__remote_wait(kp__remote *r, kp_flow_t flow, bool (*cond)(const kp__remote *),
                          bool *stop);
/* kp__remote_wait for a frame's turn, its time added to *ns where cond
 * does not hold at once (a wait with nothing to wait for reads no clock). */
kp_status kp__remote_wait_timed(kp__remote *r, kp_flow_t flow, bool (*cond)(const kp__remote *),
                                bool *stop, _Atomic uint64_t *ns);
/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t kp__remote_ns_now(void);
/* Makes an end checked by remote_end.c as a stage: its kind added for the
 * flow (once), its state, its stage and end functions, and (optional) the
 * work it does each time round a wait and the work its progress thread
 * does (kp__remote.away). */
kp_status kp__remote_stage_made(const kp__remote_end *e, kp_flow_stage_fn fn, kp_flow_end_fn end_fn,
                                kp_status (*serve)(kp__remote *r), kp__remote_post_fn post_slot,
                                bool (*away)(kp__remote *r), kp__stage_made *out);
/* The progress thread's sends on the endpoint, between these two: enter
 * says no where the endpoint closes (kp__remote_ep_close waits for leave). */
bool kp__remote_ep_enter(kp__remote *r);
void kp__remote_ep_leave(kp__remote *r);
/* Hands a slot whose frame is ready (kp__slot.seq set) to the progress
 * thread, which posts its operations (r->post_slot) and tests them until
 * they end; or posts them here where there is no such thread or it sleeps
 * (waking it would cost the frame more than the post does; a paced
 * stream finds it asleep). Frames are handed in order. UCS_OK, or why a
 * post here failed (the caller makes it the link's error). */
ucs_status_t kp__remote_hand(kp__remote *r, kp__slot *sl);
/* Whether a slot's operations have ended and it is the stage's thread's
 * again: the sender's frame has left (or the slot never held one), the
 * receiver's frame is in. */
static inline bool kp__remote_slot_ended(const kp__slot *sl) {
    return atomic_load_explicit(&sl->state, memory_order_acquire) == KP__SLOT_OURS &&
           sl->hdr_op.done && sl->data_op.done;
}
/* The progress thread's part: posts the slots handed to it, in order, and
 * tests those away, giving each back (OURS) once both its operations
 * ended; whether any moved. Called from r->away. */
bool kp__remote_slots_away(kp__remote *r);
/* An end's figures, for kp_flow_remote: from any thread. */
kp_status kp__remote_stats(void *user, kp_flow_remote_stats *out);

#endif
