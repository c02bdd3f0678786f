/* What the public device API's files (device.c, graphs.c) share: the
 * handle checks and the vtable call every public function makes, and the
 * check of a launch, which streams and graphs both take. */
#ifndef KPIPE_API_IMPL_H
#define KPIPE_API_IMPL_H

#include "backend-impl.h"

#define KP__HANDLE(h, what)                                                               \
    do {                                                                                  \
        if (!(h)) return kp__error(KP_ERR_INVALID_ARG, "%s: %s is NULL", __func__, what); \
    } while (0)

/* `b` (called `what`) must be on the device of `a` (called `owner`). */
#define KP__SAME_DEV(a, owner, b, what)                                                   \
    do {                                                                                  \
        if ((a)->h.dev != (b)->h.dev)                                                     \
            return kp__error_devices(__func__, what, (b)->h.dev, (b)->h.dev->name, owner, \
                                     (a)->h.dev, (a)->h.dev->name);                       \
    } while (0)

/* The vtable call on a handle's device and object. */
#define KP__CALL(obj, slot, ...) (obj)->h.dev->iface->slot((obj)->h.dev->ctx, __VA_ARGS__)

/* --- handles ------------------------------------------------------------------- */
/* A handle of `dev` whose object the caller makes into h->impl; then
 * kp__handle_done publishes it or, on failure, frees it. */
static inline kp__handle *kp__handle_new(kp_device_t dev, const char *fn, kp_status *st) {
    kp__handle *h = kp__calloc(1, sizeof *h);
    if (!h)
        *st = kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a handle", fn);
    else
        h->dev = dev;
    return h;
}

static inline kp__handle *kp__handle_done(kp__handle *h, kp_status st) {
    if (st == KP_OK) return h;
    kp__free(h);
    return NULL;
}

/* Makes the object with `make` (a vtable call writing h->impl) and stores
 * the handle, as the public type `T`, in *out; on failure returns the
 * status with the function's name in its detail. struct kp_stream and the
 * other handle types begin with their kp__handle. */
#define KP__MAKE_HANDLE(T, dev, out, make)                   \
    do {                                                     \
        KP__HANDLE(out, "out");                              \
        *(out) = NULL;                                       \
        kp_status st_ = KP_OK;                               \
        kp__handle *h = kp__handle_new(dev, __func__, &st_); \
        if (!h) return st_;                                  \
        st_ = (make);                                        \
        *(out) = (T)kp__handle_done(h, st_);                 \
        return st_;                                          \
    } while (0)

/* A launch the device can run: geometry, parameters and an implementation
 * of the device's kernel form (device.c). */
kp_status kp__check_launch(kp_device_t dev, const kp_launch *l, const char *fn);

#endif
