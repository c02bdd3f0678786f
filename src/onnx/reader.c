/* ONNX model files: reading them; the messages that describe a tensor
 * (TensorProto, with its elements from raw_data, the typed fields or an
 * external file, and ValueInfoProto's type and shape); and freeing what the
 * decoders build. The graph's structure is decoded in reader_msg.c.
 *
 * A model file is mapped rather than read, so that each initializer's
 * raw_data is copied exactly once, from the page cache into the tensor.
 * External data is read with pread straight into the tensor. Its location
 * is untrusted text from the file: it must be relative, must not climb out
 * with "..", and no component may be a symbolic link; every component is
 * opened relative to the one before with O_NOFOLLOW, so that what is
 * checked is what is read. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader-impl.h"

/* Short names for the cursor's types, as in reader_msg.c. */
typedef kp__ox_pb_msg msg;
typedef kp__ox_pb_field fld;

/* --- external data ------------------------------------------------------------ */

/* Refuses locations that could leave the model's folder by their text. */
static kp_status ext_check_text(const char *tensor, const char *loc) {
    if (!loc[0])
        return kp__error(KP_ERR_PARSE, "tensor '%.200s': its external data location is empty",
                         tensor);
    if (loc[0] == '/')
        return kp__error(KP_ERR_PARSE,
                         "tensor '%.200s': external data location '%.200s' is an absolute path; "
                         "it must be relative to the model's folder",
                         tensor, loc);
    for (const char *c = loc; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return kp__error(KP_ERR_PARSE,
                             "tensor '%.200s': external data location '%.200s' climbs out of the "
                             "model's folder with \"..\"",
                             tensor, loc);
        c += n;
        c += *c == '/';
    }
    return KP_OK;
}

static kp_status ext_io(const char *tensor, const char *dir, const char *loc, const char *what,
                        int err) {
    return kp__error(KP_ERR_IO, "tensor '%.200s': external data file '%.200s' in %.200s: %s%s%s",
                     tensor, loc, dir, what, err ? ": " : "", err ? strerror(err) : "");
}

/* Opens dir/loc component by component, refusing symbolic links. */
static kp_status ext_open(const char *dir, const char *tensor, const char *loc, int *out) {
    KP_CHECK(ext_check_text(tensor, loc));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ext_io(tensor, dir, loc, "cannot open the model's folder", errno);
    char comp[256];
    for (const char *c = loc; *c;) {
        size_t n = strcspn(c, "/");
        bool last = c[n] == '\0' || c[n + strspn(c + n, "/")] == '\0';
        struct stat st;
        int nfd = -1, err = 0;
        if (n >= sizeof comp) err = ENAMETOOLONG;
        if (!err) {
            memcpy(comp, c, n);
            comp[n] = '\0';
        }
        c += n;
        c += strspn(c, "/");
        if (!err && (n == 0 || strcmp(comp, ".") == 0)) continue;
        if (!err && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) != 0) err = errno;
        if (!err && S_ISLNK(st.st_mode)) {
            close(fd);
            return ext_io(tensor, dir, loc, "it goes through a symbolic link, which is refused", 0);
        }
        if (!err && last && !S_ISREG(st.st_mode)) {
            close(fd);
            return ext_io(tensor, dir, loc, "not a regular file", 0);
        }
        if (!err) {
            nfd = openat(fd, comp,
                         O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (last ? 0 : O_DIRECTORY));
            if (nfd < 0) err = errno;
        }
        close(fd);
        if (err) return ext_io(tensor, dir, loc, "cannot open it", err);
        fd = nfd;
    }
    *out = fd;
    return KP_OK;
}

static kp_status read_at(int fd, void *dst, size_t bytes, uint64_t offset) {
    for (size_t done = 0; done < bytes;) {
        ssize_t r = pread(fd, (char *)dst + done, bytes - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : EIO;
        done += (size_t)r;
    }
    return 0;
}

/* Tensor `tensor`'s external data: `bytes` bytes at `offset` of file
 * `location` under `dir`, which holds `length` bytes there (UINT64_MAX:
 * the rest of the file). *out is a new buffer, NULL when bytes is 0. */
static kp_status ext_read(const char *dir, const char *tensor, const char *location,
                          uint64_t offset, uint64_t length, size_t bytes, void **out) {
    int fd = -1;
    struct stat st;
    *out = NULL;
    KP_CHECK(ext_open(dir, tensor, location, &fd));
    kp_status s = KP_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ext_io(tensor, dir, location, "not a regular file", 0);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (offset > size)
        s = kp__error(KP_ERR_PARSE,
                      "tensor '%.200s': external data file '%.200s' holds %llu bytes, shorter than "
                      "its offset %llu",
                      tensor, location, (unsigned long long)size, (unsigned long long)offset);
    else if (length != UINT64_MAX && length > size - offset)
        s = kp__error(KP_ERR_PARSE,
                      "tensor '%.200s': external data file '%.200s' holds %llu bytes, shorter than "
                      "offset %llu + length %llu",
                      tensor, location, (unsigned long long)size, (unsigned long long)offset,
                      (unsigned long long)length);
    if (s == KP_OK && length == UINT64_MAX) length = size - offset;
    if (s == KP_OK && length != bytes)
        s = kp__error(
            KP_ERR_PARSE,
            "tensor '%.200s': its external data is %llu bytes; its dims and type need %zu", tensor,
            (unsigned long long)length, bytes);
    void *data = NULL;
    if (s == KP_OK && bytes && !(data = kp__malloc(bytes)))
        s = kp__error(KP_ERR_OUT_OF_MEMORY, "tensor '%.200s': no memory for %zu bytes", tensor,
                      bytes);
    int err = s == KP_OK ? read_at(fd, data, bytes, offset) : 0;
    if (err) s = ext_io(tensor, dir, location, "cannot read it", err);
    close(fd);
    if (s != KP_OK) {
        kp__free(data);
        return s;
    }
    *out = data;
    return KP_OK;
}

/* --- TensorProto ------------------------------------------------------------------ */

static const kp__ox_pb_fspec tensor_spec[] = {
    [1] = {"dims", KP__OX_PB_INTS},          [2] = {"data_type", KP__OX_PB_INT},
    [3] = {"segment", KP__OX_PB_LEN},        [4] = {"float_data", KP__OX_PB_F32S},
    [5] = {"int32_data", KP__OX_PB_INTS},    [6] = {"string_data", KP__OX_PB_LEN},
    [7] = {"int64_data", KP__OX_PB_INTS},    [8] = {"name", KP__OX_PB_NAME},
    [9] = {"raw_data", KP__OX_PB_LEN},       [10] = {"double_data", KP__OX_PB_F64S},
    [11] = {"uint64_data", KP__OX_PB_INTS},  [12] = {"doc_string", KP__OX_PB_LEN},
    [13] = {"external_data", KP__OX_PB_LEN}, [14] = {"data_location", KP__OX_PB_INT}};

static const kp__ox_pb_fspec entry_spec[] = {
    [1] = {"key", KP__OX_PB_LEN}, [2] = {"value", KP__OX_PB_LEN}};

/* Where the tensor's elements are, gathered by the second pass. */
typedef struct tinfo {
    size_t rank;
    const uint8_t *raw;
    size_t raw_len;
    bool has_raw, external;
    char *location;
    uint64_t offset, length;
} tinfo;

static bool span_is(const fld *f, const char *s) {
    return f->len == strlen(s) && memcmp(f->data, s, f->len) == 0;
}

static kp_status number(msg *m, const fld *f, uint64_t *out) {
    uint64_t x = 0;
    bool ok = f->len > 0;
    for (size_t i = 0; ok && i < f->len; i++) {
        unsigned d = (unsigned)f->data[i] - '0';
        ok = d <= 9 && x <= (UINT64_MAX - d) / 10;
        x = x * 10 + d;
    }
    if (!ok)
        return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                             "the value '%.*s' is not a whole number",
                             (int)(f->len < 40 ? f->len : 40), f->len ? (const char *)f->data : "");
    *out = x;
    return KP_OK;
}

/* One external_data entry: location, offset or length (others are ignored). */
static kp_status ext_entry(const msg *up, const fld *fe, tinfo *ti) {
    msg m;
    fld f, key = {0}, val = {0};
    bool got;
    KP__OX_PB_OPEN(&m, up, fe, "StringStringEntryProto", entry_spec, -1);
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) key = f;
        if (f.num == 2) val = f;
    }
    m.name = "external_data";
    if (span_is(&key, "location")) return kp__ox_pb_str(&m, &val, &ti->location);
    if (span_is(&key, "offset")) return number(&m, &val, &ti->offset);
    if (span_is(&key, "length")) return number(&m, &val, &ti->length);
    return KP_OK;
}

static kp_status tensor_fields(msg *m, kp__ox_tensor *t, tinfo *ti) {
    fld f;
    bool got;
    for (;;) {
        KP_CHECK(kp__ox_pb_next(m, &f, &got));
        if (!got) return KP_OK;
        switch (f.num) {
        case 1: KP_CHECK(kp__ox_pb_ints(m, &f, t->shape, KP_MAX_DIMS, &ti->rank)); break;
        case 2: t->onnx_type = (int)(int32_t)f.v; break;
        case 3:
            return kp__ox_pb_bad(m, KP_ERR_UNSUPPORTED, f.at, "",
                                 "segmented tensors are not supported");
        case 8:
            KP_CHECK(kp__ox_pb_str(m, &f, &t->name));
            m->name = t->name;
            break;
        case 9:
            ti->raw = f.data;
            ti->raw_len = f.len;
            ti->has_raw = true;
            break;
        case 13: KP_CHECK(ext_entry(m, &f, ti)); break;
        case 14: ti->external = f.v == 1; break;
        default: break;
        }
    }
}

static kp_status mismatch(const msg *m, const kp__ox_tensor *t, const char *what, size_t have,
                          const char *unit, size_t need) {
    char sh[160];
    size_t n = (size_t)snprintf(sh, sizeof sh, "[");
    for (int i = 0; i < t->ndim && n < sizeof sh; i++)
        n +=
            (size_t)snprintf(sh + n, sizeof sh - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < sizeof sh) snprintf(sh + n, sizeof sh - n, "]");
    return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                         "%s holds %zu %s; its dims %s of %s need %zu", what, have, unit, sh,
                         kp__ox_type_name(t->onnx_type), need);
}

/* Elements of a typed field, stored in kpipe's little-endian layout. */
typedef struct typed_dst {
    uint8_t *p;
    int onnx_type;
    size_t cap;
} typed_dst;

static void put(void *ctx, size_t k, uint64_t v) {
    const typed_dst *d = ctx;
    unsigned size = 1;
    switch (d->onnx_type) {
    case KP__OX_INT64:
    case KP__OX_UINT64: size = 8; break;
    case KP__OX_INT32: size = 4; break;
    case KP__OX_INT16:
    case KP__OX_FLOAT16:
    case KP__OX_BFLOAT16: size = 2; break;
    case KP__OX_BOOL: v = (uint32_t)v != 0; break;
    default: break;
    }
    for (unsigned i = 0; k < d->cap && i < size; i++) d->p[size * k + i] = (uint8_t)(v >> (8 * i));
}

/* A third pass for a tensor whose elements are in a typed field: float_data
 * for FLOAT, int64_data, uint64_data, and int32_data for the narrower
 * integers, BOOL and the 16-bit floats (as bit patterns). */
static kp_status typed(msg *m, kp__ox_tensor *t, size_t bytes) {
    uint32_t num = t->onnx_type == KP__OX_FLOAT    ? 4
                   : t->onnx_type == KP__OX_INT64  ? 7
                   : t->onnx_type == KP__OX_UINT64 ? 11
                                                   : 5;
    size_t k = 0, have = m->count[num];
    fld f;
    bool got;
    if (have != (size_t)t->numel)
        return mismatch(m, t, tensor_spec[num].name, have, "elements", (size_t)t->numel);
    if (!have) return KP_OK;
    typed_dst d = {.p = t->data = kp__malloc(bytes), .onnx_type = t->onnx_type, .cap = have};
    if (!d.p) return kp__ox_pb_oom(1, bytes);
    t->bytes = bytes;
    for (m->p = m->start;;) {
        KP_CHECK(kp__ox_pb_next(m, &f, &got));
        if (!got) return KP_OK;
        if (f.num != num) continue;
        if (num != 4) {
            KP_CHECK(kp__ox_pb_each(m, &f, &k, put, &d));
            continue;
        }
        /* floats are little-endian 4-byte values on the wire, as in kpipe */
        size_t n = f.wt == 2 ? f.len / 4 : 1;
        if (k + n <= have) memcpy(d.p + 4 * k, f.data, 4 * n);
        k += n;
    }
}

static kp_status tensor_data(msg *m, kp__ox_tensor *t, tinfo *ti) {
    t->dtype_ok = kp__ox_dtype(t->onnx_type, &t->dtype);
    if (!t->dtype_ok) return KP_OK;
    size_t es = kp_dtype_size(t->dtype);
    if ((uint64_t)t->numel > KP__MAX_ALLOC_BYTES / es)
        return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed", "%lld elements are too many",
                             (long long)t->numel);
    size_t bytes = (size_t)t->numel * es;
    if (ti->external) {
        if (!ti->location)
            return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                                 "external data without a location");
        if (!m->dir)
            return kp__ox_pb_bad(m, KP_ERR_UNSUPPORTED, m->start, "",
                                 "its data is in file '%.200s', and a model read from memory has "
                                 "no folder to find it in",
                                 ti->location);
        KP_CHECK(ext_read(m->dir, t->name, ti->location, ti->offset, ti->length, bytes, &t->data));
        t->bytes = bytes;
    } else if (ti->has_raw) {
        if (ti->raw_len != bytes) return mismatch(m, t, "raw_data", ti->raw_len, "bytes", bytes);
        if (bytes && !(t->data = kp__malloc(bytes))) return kp__ox_pb_oom(1, bytes);
        if (bytes) memcpy(t->data, ti->raw, bytes);
        t->bytes = bytes;
    } else {
        KP_CHECK(typed(m, t, bytes));
    }
    uint8_t *b = t->data;
    if (t->onnx_type == KP__OX_BOOL)
        for (size_t i = 0; i < t->bytes; i++) b[i] = b[i] != 0;
    return KP_OK;
}

/* Rank, dims and element count, after the second pass. */
static kp_status tensor_shape(msg *m, kp__ox_tensor *t, const tinfo *ti) {
    if (ti->rank > KP_MAX_DIMS)
        return kp__ox_pb_bad(m, KP_ERR_UNSUPPORTED, m->start, "",
                             "rank %zu is over the %d dimensions kpipe holds", ti->rank,
                             KP_MAX_DIMS);
    t->ndim = (int)ti->rank;
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                                 "dims[%d] = %lld is negative", i, (long long)t->shape[i]);
        if (t->shape[i] && t->numel > INT64_MAX / t->shape[i])
            return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                                 "the product of its dims overflows");
        t->numel *= t->shape[i];
    }
    return KP_OK;
}

kp_status kp__ox_decode_tensor(const msg *up, const fld *f, long index, kp__ox_tensor *t) {
    msg m;
    tinfo ti = {.length = UINT64_MAX};
    if (up)
        KP__OX_PB_OPEN(&m, up, f, "TensorProto", tensor_spec, index);
    else
        kp__ox_pb_open(&m, NULL, f->data, f->len, "TensorProto", tensor_spec,
                       sizeof tensor_spec / sizeof tensor_spec[0], index);
    KP_CHECK(kp__ox_pb_tally(&m));
    kp_status st = tensor_fields(&m, t, &ti);
    if (st == KP_OK) st = kp__ox_pb_str_default(&t->name);
    if (st == KP_OK) st = tensor_shape(&m, t, &ti);
    if (st == KP_OK) st = tensor_data(&m, t, &ti);
    kp__free(ti.location);
    return st;
}

/* --- ValueInfoProto and its type --------------------------------------------- */

/* clang-format off */
static const kp__ox_pb_fspec vi_spec[] = {
    [1] = {"name", KP__OX_PB_NAME}, [2] = {"type", KP__OX_PB_LEN},
    [3] = {"doc_string", KP__OX_PB_LEN}};
static const kp__ox_pb_fspec type_spec[] = {
    [1] = {"tensor_type", KP__OX_PB_LEN}, [4] = {"sequence_type", KP__OX_PB_LEN},
    [5] = {"map_type", KP__OX_PB_LEN}, [6] = {"denotation", KP__OX_PB_LEN},
    [8] = {"sparse_tensor_type", KP__OX_PB_LEN}, [9] = {"optional_type", KP__OX_PB_LEN}};
static const kp__ox_pb_fspec ttype_spec[] = {
    [1] = {"elem_type", KP__OX_PB_INT}, [2] = {"shape", KP__OX_PB_LEN}};
static const kp__ox_pb_fspec shape_spec[] = {
    [1] = {"dim", KP__OX_PB_LEN}};
static const kp__ox_pb_fspec dim_spec[] = {
    [1] = {"dim_value", KP__OX_PB_INT}, [2] = {"dim_param", KP__OX_PB_LEN},
    [3] = {"denotation", KP__OX_PB_LEN}};
/* clang-format on */

static kp_status dim(const msg *up, const fld *fd, long index, kp__ox_dim *d) {
    msg m;
    fld f;
    bool got;
    KP__OX_PB_OPEN(&m, up, fd, "TensorShapeProto.Dimension", dim_spec, index);
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) return KP_OK;
        if (f.num == 1) {
            /* Some exporters write -1 for a dimension they do not know. */
            d->value = (int64_t)f.v >= 0 ? (int64_t)f.v : -1;
            kp__free(d->param);
            d->param = NULL;
        } else if (f.num == 2) {
            KP_CHECK(kp__ox_pb_str(&m, &f, &d->param));
            d->value = -1;
        }
    }
}

static kp_status shape(const msg *up, const fld *fs, kp__ox_value_info *v) {
    msg m;
    fld f;
    bool got;
    KP__OX_PB_OPEN(&m, up, fs, "TensorShapeProto", shape_spec, -1);
    KP_CHECK(kp__ox_pb_tally(&m));
    if (m.count[1] > KP_MAX_DIMS)
        return kp__ox_pb_bad(&m, KP_ERR_UNSUPPORTED, m.start, "",
                             "rank %zu is over the %d dimensions kpipe holds", m.count[1],
                             KP_MAX_DIMS);
    for (int i = 0; i < KP_MAX_DIMS; i++) {
        kp__free(v->dims[i].param);
        v->dims[i] = (kp__ox_dim){.value = -1, .param = NULL};
    }
    v->has_shape = true;
    v->ndim = 0;
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) return KP_OK;
        if (f.num == 1 && v->ndim < KP_MAX_DIMS) {
            v->ndim++;
            KP_CHECK(dim(&m, &f, v->ndim - 1, &v->dims[v->ndim - 1]));
        }
    }
}

/* TypeProto and its Tensor: only tensor types are kept (onnx_type stays 0 for others). */
static kp_status type_proto(const msg *up, const fld *ft, bool tensor_level, kp__ox_value_info *v) {
    msg m;
    fld f;
    bool got;
    if (tensor_level)
        KP__OX_PB_OPEN(&m, up, ft, "TypeProto.Tensor", ttype_spec, -1);
    else
        KP__OX_PB_OPEN(&m, up, ft, "TypeProto", type_spec, -1);
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) return KP_OK;
        if (!tensor_level && f.num == 1) KP_CHECK(type_proto(&m, &f, true, v));
        if (tensor_level && f.num == 1) v->onnx_type = (int)(int32_t)f.v;
        if (tensor_level && f.num == 2) KP_CHECK(shape(&m, &f, v));
    }
}

kp_status kp__ox_decode_value_info(const msg *up, const fld *fv, long index, kp__ox_value_info *v) {
    msg m;
    fld f;
    bool got;
    KP__OX_PB_OPEN(&m, up, fv, "ValueInfoProto", vi_spec, index);
    for (int i = 0; i < KP_MAX_DIMS; i++) v->dims[i].value = -1;
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) {
            KP_CHECK(kp__ox_pb_str(&m, &f, &v->name));
            m.name = v->name;
        }
        if (f.num == 2) KP_CHECK(type_proto(&m, &f, false, v));
    }
    return kp__ox_pb_str_default(&v->name);
}

/* --- entry points --------------------------------------------------------------- */

kp_status kp__ox_read_buffer(const void *buf, size_t len, const char *dir, kp__ox_model **out) {
    if (!out || (!buf && len))
        return kp__error(KP_ERR_INVALID_ARG, "kp__ox_read_buffer: NULL buffer or result");
    if (len > KP__OX_MAX_FILE)
        return kp__error(KP_ERR_PARSE, "not an ONNX model file: %zu bytes is over protobuf's 2 GiB",
                         len);
    kp__ox_model *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "reading an ONNX model: no memory");
    kp_status st = kp__ox_decode_model(buf, len, dir, m);
    if (st != KP_OK) {
        kp__ox_model_free(m);
        return st;
    }
    *out = m;
    return KP_OK;
}

/* The folder of `path` ("." for a bare name), as a new string. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *d = kp__malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, slash ? path : ".", n);
    d[n] = '\0';
    return d;
}

/* The whole file, mapped (or read where it cannot be mapped). */
static kp_status load(int fd, size_t size, void **buf, bool *mapped) {
    *mapped = false;
    *buf = NULL;
    if (size == 0) return KP_OK;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        posix_madvise(p, size, POSIX_MADV_SEQUENTIAL);
        *mapped = true;
        *buf = p;
        return KP_OK;
    }
    if (!(p = kp__malloc(size)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "no memory for %zu bytes", size);
    int err = read_at(fd, p, size, 0);
    if (err) {
        kp__free(p);
        return kp__error(KP_ERR_IO, "cannot read it: %s", strerror(err));
    }
    *buf = p;
    return KP_OK;
}

kp_status kp__ox_read_file(const char *path, kp__ox_model **out) {
    if (!path || !out)
        return kp__error(KP_ERR_INVALID_ARG, "kp__ox_read_file: NULL path or result");
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return kp__error(KP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    kp_status s = KP_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = kp__error(KP_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size > KP__OX_MAX_FILE)
        s = kp__error(KP_ERR_PARSE,
                      "%s: not an ONNX model file: %lld bytes is over protobuf's 2 GiB", path,
                      (long long)st.st_size);
    void *buf = NULL;
    bool mapped = false;
    size_t size = s == KP_OK ? (size_t)st.st_size : 0;
    if (s == KP_OK && (s = load(fd, size, &buf, &mapped)) != KP_OK) kp__error_prefix(s, "%s", path);
    close(fd);
    if (s != KP_OK) return s;
    char *dir = dir_of(path);
    kp__ox_model *m = NULL;
    if (!dir)
        s = kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory", path);
    else if ((s = kp__ox_read_buffer(buf, size, dir, &m)) != KP_OK)
        kp__error_prefix(s, "%s", path);
    kp__free(dir);
    if (mapped)
        munmap(buf, size);
    else
        kp__free(buf);
    if (s == KP_OK) *out = m;
    return s;
}

kp_status kp__ox_read_tensor(const void *buf, size_t len, kp__ox_tensor *out) {
    if (!out || (!buf && len))
        return kp__error(KP_ERR_INVALID_ARG, "kp__ox_read_tensor: NULL buffer or result");
    if (len > KP__OX_MAX_FILE)
        return kp__error(KP_ERR_PARSE, "TensorProto: %zu bytes is over protobuf's 2 GiB", len);
    kp__ox_tensor t = {0};
    fld whole = {.data = buf, .len = len};
    kp_status st = kp__ox_decode_tensor(NULL, &whole, -1, &t);
    if (st != KP_OK) {
        kp__ox_tensor_clear(&t);
        return st;
    }
    *out = t;
    return KP_OK;
}

/* --- freeing ------------------------------------------------------------------- */

void kp__ox_tensor_clear(kp__ox_tensor *t) {
    if (!t) return;
    kp__free(t->name);
    kp__free(t->data);
    t->name = NULL;
    t->data = NULL;
    t->bytes = 0;
}

static void free_strings(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++) kp__free(s[i]);
    kp__free(s);
}

static void free_attr(kp__ox_attr *a) {
    kp__free(a->name);
    kp__free(a->s);
    kp__free(a->floats);
    kp__free(a->ints);
    free_strings(a->strings, a->n);
    if (a->t) kp__ox_tensor_clear(a->t);
    kp__free(a->t);
}

static void free_node(kp__ox_node *n) {
    kp__free(n->name);
    kp__free(n->op_type);
    kp__free(n->domain);
    free_strings(n->inputs, n->n_inputs);
    free_strings(n->outputs, n->n_outputs);
    for (size_t i = 0; n->attrs && i < n->n_attrs; i++) free_attr(&n->attrs[i]);
    kp__free(n->attrs);
}

static void free_value_infos(kp__ox_value_info *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) {
        kp__free(v[i].name);
        for (int d = 0; d < KP_MAX_DIMS; d++) kp__free(v[i].dims[d].param);
    }
    kp__free(v);
}

void kp__ox_model_free(kp__ox_model *m) {
    if (!m) return;
    kp__free(m->producer);
    kp__free(m->graph_name);
    for (size_t i = 0; m->opsets && i < m->n_opsets; i++) kp__free(m->opsets[i].domain);
    kp__free(m->opsets);
    for (size_t i = 0; m->nodes && i < m->n_nodes; i++) free_node(&m->nodes[i]);
    kp__free(m->nodes);
    for (size_t i = 0; m->inits && i < m->n_inits; i++) kp__ox_tensor_clear(&m->inits[i]);
    kp__free(m->inits);
    free_value_infos(m->inputs, m->n_inputs);
    free_value_infos(m->outputs, m->n_outputs);
    free_value_infos(m->value_info, m->n_value_info);
    kp__free(m);
}

int64_t kp__ox_model_opset(const kp__ox_model *m, const char *domain) {
    int64_t v = 0;
    bool onnx = !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; m && i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain ? m->opsets[i].domain : "";
        bool match = onnx ? (!d[0] || strcmp(d, "ai.onnx") == 0) : strcmp(d, domain) == 0;
        if (match && m->opsets[i].version > v) v = m->opsets[i].version;
    }
    return v;
}
