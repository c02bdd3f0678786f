/* Remote queues' lanes between two ends of one host. The link starts on
 * an endpoint made from a socket address (tcp, whatever the host); each
 * end's hello or welcome then carries its host's identity and the name of
 * a file holding its UCX worker address. Where both ends are on one host,
 * each makes a second
 * endpoint from the other's worker address, on which UCX takes its
 * shared-memory transports (sysv or posix for messages, cma for large
 * ones), and sends on that from then on; the first endpoint stays open
 * only to see the peer lost (UCX 1.13 keeps an endpoint with peer error
 * handling off shared memory, so the lane itself has none).
 *
 * Device frames between two ends of one host go further: the receiver
 * offers CUDA IPC (its slots, one device allocation, exported in the
 * welcome), the sender maps them and copies each frame straight into its
 * slot, device to device (peer to peer between two GPUs), recording an
 * event of its own a slot that the receiver waits for, on the host and
 * watching the link, before its copy out (a stream of its own waiting on
 * the event would hang for good where the sender dies mid-copy: see
 * kp__ipc_copied); only the frame's header travels on the link. The receiver has
 * twice the credits in slots (KP__IPC_SLOTS), so the slot a new credit
 * lets the sender fill held a frame whose copy out ended long before: the
 * credit goes back as the frame is taken, not after its copy has run.
 * (With a spare slot only, as the pinned slots have, 8 MiB frames between
 * two H200s ran at 0.67x cudaMemcpyPeerAsync. Ordering the sender's next
 * copy into a slot after the receiver's copy out with a second event, one
 * the receiver records, was slower still: 0.51x, and 0.02x on one GPU,
 * where a wait on an event another process records took 300 us.)
 * The sender answers the offer (KP__T_IPC): its events' handles, or no
 * (the mapping failed: the devices cannot reach each other), and frames
 * then go through pinned slots on the lane.
 *
 * The worker address never crosses the link: UCX 1.13 aborts the process
 * on a malformed one (an assertion in ucp_address_unpack), so an address
 * taken from a hello would let any peer kill the receiver. Each end writes
 * its own into a file of a directory only its user can reach (mode 0700,
 * owned by that user: $XDG_RUNTIME_DIR/kpipe, else /dev/shm/kpipe-UID),
 * named by its pid and a random nonce, and the peer reads it only from
 * there, only where the file is a regular file of the same user that no
 * one else may write. What reaches UCX then came from a process of the
 * same user, which could as well attach to this one.
 *
 * KP_REMOTE_LANE=tcp keeps a link on its first endpoint, and
 * KP_REMOTE_LANE=shm keeps device frames on the link (no CUDA IPC): for
 * measuring each, and for a host whose shared memory UCX must not use. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote-impl.h"

/* KP_REMOTE_LANE: 2 all lanes (unset, "auto"), 1 shared memory but no
 * CUDA IPC ("shm"), 0 none ("tcp"). */
static int kp__lanes_allowed(void) {
    const char *v = getenv("KP_REMOTE_LANE");
    if (!v || !*v || strcmp(v, "auto") == 0) return 2;
    if (strcmp(v, "shm") == 0) return 1;
    return 0;
}

void kp__lane_host(unsigned char host[KP__HOST_BYTES]) {
    memset(host, 0, KP__HOST_BYTES);
    char id[40] = "", name[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return; /* unknown: no lanes */
    size_t n = fread(id, 1, 36, f);
    fclose(f);
    if (n != 36) return;
    if (gethostname(name, sizeof name - 1) != 0) name[0] = 0;
    snprintf((char *)host, KP__HOST_BYTES, "%.36s/%.10s", id, name);
}

/* Whether the peer's host is this one (an unknown host is none). */
static bool kp__same_host(const unsigned char host[KP__HOST_BYTES]) {
    unsigned char mine[KP__HOST_BYTES];
    kp__lane_host(mine);
    return mine[0] && memcmp(mine, host, KP__HOST_BYTES) == 0;
}

/* The directory of published addresses, made where missing; false where
 * it is not this user's alone (then no lanes). */
static bool kp__lane_dir(char *out, size_t len) {
    const char *run = getenv("XDG_RUNTIME_DIR");
    if (run && *run)
        snprintf(out, len, "%s/kpipe", run);
    else
        snprintf(out, len, "/dev/shm/kpipe-%u", (unsigned)getuid());
    if (mkdir(out, 0700) != 0 && errno != EEXIST) return false;
    struct stat st;
    return lstat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
           (st.st_mode & 077) == 0;
}

/* Files left by processes that are gone. */
static void kp__lane_sweep(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        unsigned pid = 0;
        unsigned long long nonce = 0;
        char path[256];
        if (sscanf(e->d_name, "%u-%16llx.addr", &pid, &nonce) == 2 && pid &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH &&
            (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path)
            unlink(path);
    }
    closedir(d);
}

static void kp__lane_path(char *out, size_t len, const char *dir, uint32_t pid, uint64_t nonce) {
    snprintf(out, len, "%s/%u-%016llx.addr", dir, (unsigned)pid, (unsigned long long)nonce);
}

void kp__lane_publish(kp__remote *r, uint32_t *pid, uint64_t *nonce) {
    *pid = 0;
    *nonce = 0;
    char dir[128];
    if (!kp__lanes_allowed() || !kp__lane_dir(dir, sizeof dir)) return;
    kp__lane_sweep(dir);
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, 0) != (ssize_t)sizeof n || !n) return;
    ucp_address_t *a = NULL;
    size_t len = 0;
    kp__remote_take(r);
    ucs_status_t s = ucp_worker_get_address(r->worker, &a, &len);
    kp__remote_give(r);
    if (s != UCS_OK) return;
    char path[sizeof r->lane_file];
    kp__lane_path(path, sizeof path, dir, (uint32_t)getpid(), n);
    int fd = len <= KP__ADDR_MAX ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600) : -1;
    bool ok = fd >= 0 && write(fd, a, len) == (ssize_t)len;
    if (fd >= 0) close(fd);
    ucp_worker_release_address(r->worker, a);
    if (!ok) {
        if (fd >= 0) unlink(path);
        return;
    }
    if (r->lane_file[0]) unlink(r->lane_file); /* a sender's earlier try */
    snprintf(r->lane_file, sizeof r->lane_file, "%s", path);
    *pid = (uint32_t)getpid();
    *nonce = n;
}

/* Reads the peer's published address into buf: its length, 0 where the
 * file is missing, another user's, writable by others, or too long. */
static size_t kp__lane_read(uint32_t pid, uint64_t nonce, unsigned char *buf, size_t cap) {
    char dir[128], path[256];
    if (!pid || !nonce || !kp__lane_dir(dir, sizeof dir)) return 0;
    kp__lane_path(path, sizeof path, dir, pid, nonce);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat st;
    ssize_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
        (st.st_mode & 077) == 0 && st.st_size > 0 && (size_t)st.st_size <= cap)
        got = read(fd, buf, (size_t)st.st_size);
    close(fd);
    return got > 0 && got == st.st_size ? (size_t)got : 0;
}

/* The transports of an endpoint's lanes, as UCX prints them ("lane[0]:
 * 3:sysv/memory.0 md[2] ..."), comma-separated into out; whether every
 * one is a shared-memory transport of this host. */
static bool kp__lane_kinds(ucp_ep_h ep, char *out, size_t len) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return false;
    ucp_ep_print_info(ep, f);
    fclose(f);
    static const char *const shm[] = {"sysv", "posix", "cma", "knem", "xpmem", "self"};
    bool all = true, any = false;
    out[0] = 0;
    for (const char *p = text; p && (p = strstr(p, "lane[")); p++) {
        const char *colon = strchr(p, ':');
        const char *t = colon ? strchr(colon + 1, ':') : NULL; /* "3:sysv/..." */
        const char *slash = t ? strchr(t, '/') : NULL;
        if (!slash || slash - t > 16) continue;
        char name[17];
        snprintf(name, sizeof name, "%.*s", (int)(slash - t - 1), t + 1);
        bool known = false;
        for (size_t k = 0; k < sizeof shm / sizeof shm[0]; k++) known |= !strcmp(name, shm[k]);
        all &= known;
        any = true;
        if (!strstr(out, name))
            snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? ", " : "", name);
    }
    free(text);
    return any && all;
}

kp_status kp__lane_open(kp__remote *r, const unsigned char host[KP__HOST_BYTES], uint32_t pid,
                        uint64_t nonce) {
    snprintf(r->lane, sizeof r->lane, "tcp");
    if (!pid || !kp__lanes_allowed() || !kp__same_host(host)) return KP_OK;
    unsigned char *addr = kp__malloc(KP__ADDR_MAX);
    size_t len = addr ? kp__lane_read(pid, nonce, addr, KP__ADDR_MAX) : 0;
    if (!len) { /* not published here (another host after all, or gone) */
        kp__free(addr);
        return KP_OK;
    }
    ucp_ep_params_t p = {0};
    /* no peer error handling: UCX 1.13 would keep such an endpoint off
     * shared memory; the watch endpoint sees the peer lost */
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address = (const ucp_address_t *)addr;
    p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h ep = NULL;
    kp__remote_take(r);
    ucs_status_t s = ucp_ep_create(r->worker, &p, &ep);
    kp__remote_give(r);
    kp__free(addr);
    if (s != UCS_OK) return KP_OK; /* the link goes on as it is */
    char kinds[32];
    if (!kp__lane_kinds(ep, kinds, sizeof kinds)) {
        ucp_request_param_t cp = {0};
        ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &cp);
        double until = kp__remote_ms_now() + 1000;
        while (sp && !UCS_PTR_IS_ERR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
               kp__remote_ms_now() < until)
            ucp_worker_progress(r->worker);
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(r->worker, sp);
            ucp_request_free(sp);
        }
        return KP_OK;
    }
    r->watch = r->ep;
    r->ep = ep;
    snprintf(r->lane, sizeof r->lane, "shared memory (%s)", kinds);
    return KP_OK;
}

bool kp__ipc_frames(const kp__remote *r) {
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    if (kp_device_query_caps(r->dev, &caps) != KP_OK) {
        kp_clear_error();
        return false;
    }
    return !r->direct && r->frame_bytes && caps.device_memory && caps.native_api &&
           strcmp(caps.native_api, "cuda") == 0 && kp__lanes_allowed() == 2;
}

static void kp__ipc_named(kp__remote *r);

kp_status kp__ipc_offer(kp__remote *r, const kp__hello *h, kp__welcome *w) {
    w->ipc_slots = w->ipc_stride = 0;
    if (!(h->flags & KP__HELLO_CUDA) || !kp__ipc_frames(r) || !kp__same_host(h->host))
        return KP_OK;
    size_t n = KP__IPC_SLOTS(r->capacity), stride = (r->frame_bytes + 255) & ~(size_t)255, bytes;
    if (stride < r->frame_bytes || __builtin_mul_overflow(n, stride, &bytes) ||
        bytes > KP__MAX_ALLOC_BYTES)
        return KP_OK;
    size_t msg;
    if (__builtin_mul_overflow(n, sizeof(kp_ipc_handle), &msg) ||
        !(r->ipc_msg = kp__malloc(msg + sizeof(kp__ipc_reply))))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: no memory for the IPC answer", r->addr);
    r->ipc_msg_len = msg + sizeof(kp__ipc_reply); /* the answer's receive: the caller's */
    kp_status st = kp_malloc(r->dev, bytes, &r->ipc_mem);
    if (st == KP_OK) st = kp_ipc_export(r->dev, r->ipc_mem, &w->ipc_mem);
    if (st != KP_OK) { /* no offer: frames go on the link */
        kp_clear_error();
        kp_free(r->dev, r->ipc_mem);
        r->ipc_mem = NULL;
        return KP_OK;
    }
    w->ipc_slots = n;
    w->ipc_stride = stride;
    return KP_OK;
}

/* Makes the events of a taken offer, their handles into the answer. */
static kp_status kp__ipc_events(kp__remote *r, size_t n, kp_ipc_handle *handles) {
    if (!(r->ipc_ev = kp__calloc(n, sizeof *r->ipc_ev)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: no memory for IPC events", r->addr);
    for (size_t k = 0; k < n; k++)
        KP_CHECK(kp_event_create_ipc(r->dev, &r->ipc_ev[k], &handles[k]));
    return KP_OK;
}

kp_status kp__ipc_take(kp__remote *r, const kp__welcome *w) {
    if (!w->ipc_slots) return KP_OK;
    size_t n = (size_t)w->ipc_slots;
    /* the receiver's slots as the sender makes its own (KP__IPC_SLOTS),
     * each of its frame size */
    bool fits = n == KP__IPC_SLOTS(w->capacity) && w->ipc_stride >= w->frame_bytes &&
                w->ipc_stride % 256 == 0;
    if (!(r->ipc_msg = kp__calloc(1, sizeof(kp__ipc_reply) + n * sizeof(kp_ipc_handle))))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: no memory for the IPC answer", r->addr);
    kp__ipc_reply *a = r->ipc_msg;
    kp_status st = fits && kp__ipc_frames(r) && kp__same_host(w->host)
                       ? kp_ipc_open(r->dev, &w->ipc_mem, &r->ipc_mem)
                       : KP_ERR_UNSUPPORTED;
    if (st == KP_OK) st = kp__ipc_events(r, n, (kp_ipc_handle *)(a + 1));
    if (st == KP_OK) {
        a->n = n;
        r->ipc = true;
        kp__ipc_named(r);
    } else { /* no: frames go through pinned slots on the lane */
        kp_clear_error();
        kp__ipc_free(r);
        if (!(r->ipc_msg = kp__calloc(1, sizeof(kp__ipc_reply))))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: no memory", r->addr);
        n = 0;
    }
    r->ipc_msg_len = sizeof(kp__ipc_reply) + n * sizeof(kp_ipc_handle); /* the caller sends it */
    return KP_OK;
}

bool kp__ipc_answered(const kp__remote *r) { return !r->ipc_mem || r->ipc_op.done; }

kp_status kp__ipc_answer(kp__remote *r) {
    if (!r->ipc_mem) return KP_OK;
    const kp__ipc_reply *a = r->ipc_msg;
    size_t n = KP__IPC_SLOTS(r->capacity);
    if (r->ipc_op.status != UCS_OK || r->ipc_op.length < sizeof *a ||
        (a->n && (a->n != n || r->ipc_op.length != sizeof *a + n * sizeof(kp_ipc_handle))))
        return kp__error(KP_ERR_PARSE, "remote %s: a malformed answer to the CUDA IPC offer",
                         r->addr);
    if (!a->n) { /* the sender cannot map the slots: frames come on the link */
        kp_free(r->dev, r->ipc_mem);
        r->ipc_mem = NULL;
        return KP_OK;
    }
    if (!(r->ipc_ev = kp__calloc(n, sizeof *r->ipc_ev)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "remote %s: no memory for IPC events", r->addr);
    const kp_ipc_handle *h = (const kp_ipc_handle *)(a + 1);
    for (size_t k = 0; k < n; k++)
        KP_CHECK(kp_event_open_ipc(r->dev, &h[k], &r->ipc_ev[k]));
    r->ipc = true;
    kp__ipc_named(r);
    return KP_OK;
}

void kp__ipc_free(kp__remote *r) {
    for (size_t k = 0; r->ipc && r->slots && k < r->n_slots; k++) r->slots[k].buf = NULL;
    for (size_t k = 0; r->ipc_ev && k < KP__IPC_SLOTS(r->capacity); k++)
        kp_event_destroy(r->ipc_ev[k]);
    kp__free(r->ipc_ev);
    r->ipc_ev = NULL;
    if (r->ipc_mem) {
        if (r->receiver)
            kp_free(r->dev, r->ipc_mem);
        else
            kp_ipc_close(r->dev, r->ipc_mem);
    }
    r->ipc_mem = NULL;
    if (!r->ipc_op.req) { /* else the answer is still on its way: kp__remote_free's */
        kp__free(r->ipc_msg);
        r->ipc_msg = NULL;
    }
    r->ipc = false;
}

/* The lane's name says so once CUDA IPC is on. */
static void kp__ipc_named(kp__remote *r) {
    size_t n = strlen(r->lane);
    snprintf(r->lane + n, sizeof r->lane - n, " and CUDA IPC");
}
