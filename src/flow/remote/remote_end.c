/* The two ends of a remote queue as the rest of kpipe sees them, built
 * with or without UCX: every argument and address is checked here, in one
 * place for the C form (kp_flow_remote_source / _sink) and the JSON form,
 * before remote_rx.c or remote_tx.c (UCX) makes it. Without UCX a well-formed end is
 * KP_ERR_UNSUPPORTED; a malformed one fails as it would with UCX. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_end-impl.h"

/* "host:port" into a socket address; port 0 is for a receiver only. */
static kp_status kp__addr_parse(const char *text, bool receiver, struct sockaddr_storage *sa,
                                socklen_t *sa_len) {
    char host[128];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof host)
        return kp__error(KP_ERR_PARSE, "\"%s\": expected HOST:PORT", text);
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || errno || port < 0 || port > 65535)
        return kp__error(KP_ERR_PARSE, "\"%s\": the port is not a number from 0 to 65535", text);
    if (port == 0 && !receiver)
        return kp__error(KP_ERR_PARSE, "\"%s\": a sender connects to a port, not 0", text);
    snprintf(host, sizeof host, "%.*s", (int)(colon - text), text);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return kp__error(KP_ERR_PARSE, "\"%s\": cannot resolve %s: %s", text, host,
                         gai_strerror(rc));
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *sa_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (sa->ss_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
    return KP_OK;
}

/* What both ends take: a device, an address that parses, a frame size
 * that can be allocated, a timeout of 0 (for ever) or more. */
static kp_status kp__remote_check(kp__remote_end *e) {
    const char *end = e->receiver ? "remote source" : "remote sink";
    if (!e->dev || !e->addr)
        return kp__error(KP_ERR_INVALID_ARG, "%s: a device and an address are required", end);
    if (strlen(e->addr) >= 128)
        return kp__error(KP_ERR_INVALID_ARG, "%s: an address of at most 127 characters", end);
    if (e->capacity < 1 || e->capacity > KP__REMOTE_MAX_CAPACITY)
        return kp__error(KP_ERR_INVALID_ARG, "%s: capacity %zu (1 .. %d)", end, e->capacity,
                         KP__REMOTE_MAX_CAPACITY);
    if (e->timeout_ms < 0)
        return kp__error(KP_ERR_INVALID_ARG, "%s: timeout_ms %d (0: for ever, or more)", end,
                         e->timeout_ms);
    if (e->frame_bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "%s: frame_bytes %zu is more than can be allocated",
                         end, e->frame_bytes);
    return kp__addr_parse(e->addr, e->receiver, &e->sa, &e->sa_len);
}

/* Checks the end, then makes it where UCX is built. */
static kp_status kp__remote_end_make(kp__remote_end *e, kp__stage_made *out) {
    KP_CHECK(kp__remote_check(e));
#ifdef KP_HAVE_UCX
    return e->receiver ? kp__remote_source_make(e, out) : kp__remote_sink_make(e, out);
#else
    (void)out;
    return kp__error(KP_ERR_UNSUPPORTED, "remote queues: this kpipe was built without UCX");
#endif
}

kp_status kp__stage_remote_source(kp_device_t dev, const char *listen, size_t frame_bytes,
                                  size_t capacity, int timeout_ms, kp__stage_made *out) {
    kp__remote_end e = {.dev = dev,
                        .receiver = true,
                        .addr = listen,
                        .frame_bytes = frame_bytes,
                        .capacity = capacity,
                        .timeout_ms = timeout_ms};
    return kp__remote_end_make(&e, out);
}

kp_status kp__stage_remote_sink(kp_device_t dev, const char *connect, size_t frame_bytes,
                                int timeout_ms, kp__stage_made *out) {
    /* the receiver's capacity comes with its welcome; at most the queue limit */
    kp__remote_end e = {.dev = dev,
                        .receiver = false,
                        .addr = connect,
                        .frame_bytes = frame_bytes,
                        .capacity = KP__REMOTE_MAX_CAPACITY,
                        .timeout_ms = timeout_ms};
    return kp__remote_end_make(&e, out);
}

/* A made end as a stage of the C form; the flow owns its state. */
static kp_flow_stage kp__remote_as_stage(kp_device_t dev, const kp__stage_made *m, size_t cap) {
    return (kp_flow_stage){.name = "remote",
                           .fn = m->fn,
                           .user = m->user,
                           .end_fn = m->end_fn,
                           .free_fn = m->free_fn,
                           .queue_capacity = cap,
                           .dev = dev};
}

kp_status kp_flow_remote_source(kp_device_t dev, const char *listen, size_t frame_bytes,
                                size_t capacity, int timeout_ms, kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    memset(out, 0, sizeof *out);
    kp__stage_made m;
    KP_CHECK(kp__stage_remote_source(dev, listen, frame_bytes, capacity, timeout_ms, &m));
    *out = kp__remote_as_stage(dev, &m, 0);
    return KP_OK;
}

kp_status kp_flow_remote_sink(kp_device_t dev, const char *connect, size_t frame_bytes,
                              int timeout_ms, kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    memset(out, 0, sizeof *out);
    kp__stage_made m;
    KP_CHECK(kp__stage_remote_sink(dev, connect, frame_bytes, timeout_ms, &m));
    *out = kp__remote_as_stage(dev, &m, 4);
    return KP_OK;
}
