/* ONNX's protobuf wire format, and the messages that describe a tensor:
 * TensorProto (its elements placed in kpipe's layout from raw_data or the
 * typed fields) and ValueInfoProto (a value's type and shape). The graph's
 * structure is decoded with this cursor in reader.c, which also reads
 * files and external data: decoding here does no I/O.
 *
 * A message is a run of fields, each a varint tag (field number << 3 | wire
 * type) and a payload: a varint (wire type 0), 8 bytes (1), a varint length
 * and that many bytes (2: strings, bytes, nested messages, packed repeated
 * scalars) or 4 bytes (5). Groups (3 and 4) are a proto1 relic that ONNX
 * never writes; they are refused, which also stops most text early (`{` is
 * a group tag).
 *
 * Each message is read in two passes. The first walks the tags of its own
 * level, checks every length against the enclosing message and every known
 * field's wire type, and counts repeated fields, so that each array is
 * allocated once at its final size. The second decodes, opening nested
 * messages with the same two passes one level down. Every fault names the
 * message (by its name, or its place and the nearest named message around
 * it), the field and the byte offset. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reader-impl.h"

/* Short names for the cursor's types, as in reader.c. */
typedef kp__ox_pb_msg msg;
typedef kp__ox_pb_field fld;

/* "TensorProto 'w'", "NodeProto #3 in GraphProto 'main'". */
static bool named(const msg *m) { return (m->name && m->name[0]) || m->name_len; }

static int say_name(const msg *m, char *buf, size_t cap) {
    if (m->name && m->name[0]) return snprintf(buf, cap, "%s '%.200s'", m->kind, m->name);
    int len = (int)(m->name_len < 200 ? m->name_len : 200);
    return snprintf(buf, cap, "%s '%.*s'", m->kind, len, (const char *)m->name_at);
}

static void where(const msg *m, char *buf, size_t cap) {
    const msg *up = m;
    while (up && !named(up)) up = up->up;
    if (up == m) {
        say_name(m, buf, cap);
        return;
    }
    int n = m->index >= 0 ? snprintf(buf, cap, "%s #%ld", m->kind, m->index)
                          : snprintf(buf, cap, "%s", m->kind);
    if (up && n > 0 && (size_t)n + 4 < cap) {
        memcpy(buf + n, " in ", 5);
        say_name(up, buf + n + 4, cap - (size_t)n - 4);
    }
}

kp_status kp__ox_pb_bad(const msg *m, kp_status st, const uint8_t *at, const char *adj,
                        const char *fmt, ...) {
    char what[512], detail[512];
    va_list ap;
    where(m, what, sizeof what);
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return kp__error(st, "%s%s%s at byte %zu: %s", adj, adj[0] ? " " : "", what,
                     (size_t)(at - m->base), detail);
}

kp_status kp__ox_pb_oom(size_t n, size_t size) {
    return kp__error(KP_ERR_OUT_OF_MEMORY, "reading an ONNX model: no memory for %zu x %zu bytes",
                     n, size);
}

static const char *fname(const msg *m, uint32_t num, char *buf, size_t cap) {
    if (num < m->nspec && m->spec[num].name)
        snprintf(buf, cap, "field %s (%u)", m->spec[num].name, num);
    else
        snprintf(buf, cap, "field %u", num);
    return buf;
}

/* A varint of at most 10 bytes; false when it runs past `end` or overflows. */
static bool varint(const uint8_t **pp, const uint8_t *end, uint64_t *v) {
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (unsigned shift = 0; p < end && shift < 64; shift += 7) {
        uint8_t b = *p++;
        if (shift == 63 && b > 1) return false;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return true;
        }
    }
    *pp = p;
    return false;
}

static uint64_t le(const uint8_t *p, unsigned n) {
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

/* The wire types each kind takes, as bit masks, and the same for messages. */
static const unsigned char wire_ok[] = {
    [KP__OX_PB_NONE] = 0x27, [KP__OX_PB_INT] = 0x01,  [KP__OX_PB_INTS] = 0x05,
    [KP__OX_PB_F32] = 0x20,  [KP__OX_PB_F32S] = 0x24, [KP__OX_PB_F64S] = 0x06,
    [KP__OX_PB_LEN] = 0x04,  [KP__OX_PB_NAME] = 0x04};
static const char *const wire_said[] = {
    [KP__OX_PB_INT] = "0",       [KP__OX_PB_INTS] = "0 or 2", [KP__OX_PB_F32] = "5",
    [KP__OX_PB_F32S] = "5 or 2", [KP__OX_PB_F64S] = "1 or 2", [KP__OX_PB_LEN] = "2",
    [KP__OX_PB_NAME] = "2"};

static kp_status check_kind(msg *m, const fld *f) {
    unsigned k = f->num < m->nspec ? m->spec[f->num].kind : KP__OX_PB_NONE;
    unsigned whole = k == KP__OX_PB_F32S ? 4 : k == KP__OX_PB_F64S ? 8 : 1;
    char nb[64];
    if (!(wire_ok[k] >> f->wt & 1))
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed",
                             "%s has wire type %u, expected %s", fname(m, f->num, nb, sizeof nb),
                             f->wt, wire_said[k]);
    if (f->wt == 2 && f->len % whole)
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed",
                             "packed %s is %zu bytes, not whole values",
                             fname(m, f->num, nb, sizeof nb), f->len);
    if (k != KP__OX_PB_NONE) m->known = true;
    return KP_OK;
}

static const char *cut(msg *m, bool truncated) {
    m->trunc = truncated;
    return truncated ? "truncated" : "malformed";
}

/* The next field of m; *got is false at the end. */
kp_status kp__ox_pb_next(msg *m, fld *f, bool *got) {
    uint64_t tag, len;
    char nb[64];
    *got = false;
    if (m->p >= m->end) return KP_OK;
    f->at = m->p;
    if (!varint(&m->p, m->end, &tag))
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                             "a field's tag runs past the end or is over 10 bytes");
    f->num = (uint32_t)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    if (f->num == 0 || tag >> 32)
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed",
                             "field number %llu is out of range", (unsigned long long)(tag >> 3));
    size_t left = (size_t)(m->end - m->p);
    f->data = m->p;
    f->len = 0;
    switch (f->wt) {
    case 0:
        if (!varint(&m->p, m->end, &f->v))
            return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                                 "the varint of %s runs past the end or is over 10 bytes",
                                 fname(m, f->num, nb, sizeof nb));
        break;
    case 1:
    case 5:
        f->len = f->wt == 1 ? 8 : 4;
        if (left < f->len)
            return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, cut(m, true),
                                 "%s needs %zu bytes, %zu are left",
                                 fname(m, f->num, nb, sizeof nb), f->len, left);
        f->v = le(m->p, (unsigned)f->len);
        m->p += f->len;
        break;
    case 2:
        if (!varint(&m->p, m->end, &len))
            return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                                 "the length of %s runs past the end",
                                 fname(m, f->num, nb, sizeof nb));
        left = (size_t)(m->end - m->p);
        if (len > left)
            return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, cut(m, true),
                                 "%s has length %llu, which runs past the end (%zu bytes left)",
                                 fname(m, f->num, nb, sizeof nb), (unsigned long long)len, left);
        f->data = m->p;
        f->len = (size_t)len;
        m->p += len;
        break;
    default:
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed", "%s has wire type %u%s",
                             fname(m, f->num, nb, sizeof nb), f->wt,
                             f->wt == 3 || f->wt == 4 ? " (a group), which ONNX never uses"
                                                      : ", not one of protobuf's");
    }
    *got = true;
    return check_kind(m, f);
}

/* Elements in a packed run of varints: one per byte without the high bit. */
static kp_status count_packed(msg *m, const fld *f, size_t *n) {
    size_t c = 0;
    for (size_t i = 0; i < f->len; i++) c += !(f->data[i] & 0x80);
    if (f->len && (f->data[f->len - 1] & 0x80)) {
        char nb[64];
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed", "packed %s ends inside a varint",
                             fname(m, f->num, nb, sizeof nb));
    }
    *n = c;
    return KP_OK;
}

/* The first pass: checks the level's structure and counts fields. */
kp_status kp__ox_pb_tally(msg *m) {
    fld f;
    bool got;
    memset(m->count, 0, sizeof m->count);
    for (;;) {
        KP_CHECK(kp__ox_pb_next(m, &f, &got));
        if (!got) break;
        if (f.num >= KP__OX_PB_NCOUNT) continue;
        unsigned k = f.num < m->nspec ? m->spec[f.num].kind : KP__OX_PB_NONE;
        if (k == KP__OX_PB_NAME) {
            m->name_at = f.data;
            m->name_len = f.len;
        }
        size_t n = 1;
        if (f.wt == 2 && k == KP__OX_PB_INTS) KP_CHECK(count_packed(m, &f, &n));
        if (f.wt == 2 && k == KP__OX_PB_F32S) n = f.len / 4;
        if (f.wt == 2 && k == KP__OX_PB_F64S) n = f.len / 8;
        m->count[f.num] += n;
    }
    m->p = m->start;
    return KP_OK;
}

void kp__ox_pb_open(msg *m, const msg *up, const uint8_t *data, size_t len, const char *kind,
                    const kp__ox_pb_fspec *spec, size_t nspec, long index) {
    *m = (msg){.base = up ? up->base : data,
               .dir = up ? up->dir : NULL,
               .up = up,
               .kind = kind,
               .index = index,
               .spec = spec,
               .nspec = nspec,
               .start = data,
               .p = data,
               .end = data + len};
}
kp_status kp__ox_pb_each(msg *m, const fld *f, size_t *k,
                         void (*put)(void *ctx, size_t k, uint64_t v), void *ctx) {
    if (f->wt != 2) {
        put(ctx, (*k)++, f->v);
        return KP_OK;
    }
    for (const uint8_t *p = f->data, *end = p + f->len; p < end; (*k)++) {
        uint64_t v;
        if (!varint(&p, end, &v))
            return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed",
                                 "a packed varint is over 10 bytes");
        put(ctx, *k, v);
    }
    return KP_OK;
}

typedef struct int_dst {
    int64_t *p;
    size_t cap;
} int_dst;

static void put_int(void *ctx, size_t k, uint64_t v) {
    const int_dst *d = ctx;
    if (k < d->cap) d->p[k] = (int64_t)v;
}

kp_status kp__ox_pb_ints(msg *m, const fld *f, int64_t *dst, size_t cap, size_t *k) {
    int_dst d = {.p = dst, .cap = cap};
    return kp__ox_pb_each(m, f, k, put_int, &d);
}

typedef struct float_dst {
    float *p;
    size_t cap;
} float_dst;

kp_status kp__ox_pb_floats(msg *m, const fld *f, float *dst, size_t cap, size_t *k) {
    size_t n = f->wt == 2 ? f->len / 4 : 1;
    for (size_t j = 0; j < n; j++, (*k)++) {
        uint32_t bits = (uint32_t)(f->wt == 2 ? le(f->data + 4 * j, 4) : f->v);
        if (*k < cap) memcpy(&dst[*k], &bits, 4);
    }
    return KP_OK;
}

kp_status kp__ox_pb_str(msg *m, const fld *f, char **out) {
    char nb[64];
    if (f->len && memchr(f->data, 0, f->len))
        return kp__ox_pb_bad(m, KP_ERR_PARSE, f->at, "malformed", "%s holds a NUL byte",
                             fname(m, f->num, nb, sizeof nb));
    char *s = kp__malloc(f->len + 1);
    if (!s) return kp__ox_pb_oom(1, f->len + 1);
    if (f->len) memcpy(s, f->data, f->len);
    s[f->len] = '\0';
    kp__free(*out);
    *out = s;
    return KP_OK;
}

kp_status kp__ox_pb_str_default(char **s) {
    if (*s) return KP_OK;
    *s = kp__calloc(1, 1);
    return *s ? KP_OK : kp__ox_pb_oom(1, 1);
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

static kp_status tensor_data(msg *m, kp__ox_tensor *t, tinfo *ti, kp__ox_ext *ext) {
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
        /* The caller reads the file: decoding does no I/O. */
        *ext = (kp__ox_ext){.location = ti->location, .offset = ti->offset, .length = ti->length};
        ti->location = NULL;
        return KP_OK;
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

kp_status kp__ox_decode_tensor(const msg *up, const fld *f, long index, kp__ox_tensor *t,
                               kp__ox_ext *ext) {
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
    if (st == KP_OK) st = tensor_data(&m, t, &ti, ext);
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
