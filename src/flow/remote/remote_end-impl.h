/* A remote queue's two ends as the flow layers see them (src/flow/remote/,
 * above the runtime and the built-in stages: runtime < stages < remote <
 * json): the checks and the ends as stages, built with or without UCX.
 * remote_end.c defines what is declared here; remote-impl.h, the UCX link
 * itself (remote.c, remote_threads.c, remote_tx.c, remote_rx.c), includes
 * it. The JSON form (src/flow/json/) is the one layer above that
 * tests/layering.py lets include this header. */
#ifndef KPIPE_FLOW_REMOTE_END_IMPL_H
#define KPIPE_FLOW_REMOTE_END_IMPL_H

#include <sys/socket.h>

#include "../runtime/flow-impl.h"

/* Remote queues (remote_end.c, always built; remote.c with UCX). Source
 * "remote": listens on `listen` ("host:port"; port 0: any free one) for one
 * sender, whose frames (up to frame_bytes) it receives, `capacity` in
 * flight; waits for the sender up to timeout_ms (0: for ever). Sink
 * "remote": sends every frame to `connect`, trying for up to timeout_ms
 * while the receiver is not up yet. Both check every argument and the
 * address whether or not UCX is built (KP_ERR_UNSUPPORTED without it). */
#define KP__REMOTE_MAX_CAPACITY 1024
kp_status kp__stage_remote_source(kp_device_t dev, const char *listen, size_t frame_bytes,
                                  size_t capacity, int timeout_ms, kp__stage_made *out);
kp_status kp__stage_remote_sink(kp_device_t dev, const char *connect, size_t frame_bytes,
                                int timeout_ms, kp__stage_made *out);
/* A remote end as checked by remote_end.c: its arguments and the parsed
 * address. */
typedef struct kp__remote_end {
    kp_device_t dev;
    bool receiver;
    const char *addr; /* as given, "host:port" */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    size_t frame_bytes, capacity;
    int timeout_ms;
} kp__remote_end;
#ifdef KP_HAVE_UCX
/* remote_rx.c and remote_tx.c: make an end remote_end.c has checked. */
kp_status kp__remote_source_make(const kp__remote_end *end, kp__stage_made *out);
kp_status kp__remote_sink_make(const kp__remote_end *end, kp__stage_made *out);
#endif

#endif
