/* ONNX's protobuf messages, decoded straight from the wire format.
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
 * messages with the same two passes one level down. Subgraphs (attributes
 * of type GRAPH and GRAPHS, sequence and map types) are skipped unread, so
 * decoding never recurses: the deepest path is Model > Graph > Node >
 * Attribute > Tensor > external_data entry, and the nesting depth is fixed
 * by the code rather than by the file. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "onnx-impl.h"

/* What a known field must look like on the wire. */
enum {
    K_NONE,
    K_INT,
    K_INTS,
    K_F32,
    K_F32S,
    K_F64S,
    K_LEN,
    K_NAME /* K_LEN: the message's name */
};

typedef struct fspec {
    const char *name;
    unsigned char kind;
} fspec;

#define NCOUNT 32 /* fields numbered below this are counted by the first pass */

/* A message being decoded: its bytes, its place for messages, its counts. */
typedef struct msg {
    const uint8_t *base; /* the whole buffer: offsets in messages are from here */
    const char *dir;     /* external data's folder, or NULL */
    const struct msg *up;
    const char *kind;       /* "TensorProto" */
    const char *name;       /* set once decoded; "" or NULL: unnamed */
    const uint8_t *name_at; /* else its name field as the first pass saw it */
    size_t name_len;
    long index; /* the entry's place in its repeated field, or -1 */
    const fspec *spec;
    size_t nspec;
    const uint8_t *start, *p, *end;
    bool known; /* a known field with its expected wire type was seen */
    bool trunc; /* the last failure was a field running past the end */
    size_t count[NCOUNT];
} msg;

typedef struct fld {
    uint32_t num;
    unsigned wt;
    uint64_t v; /* wire types 0, 1 and 5 */
    const uint8_t *data;
    size_t len;
    const uint8_t *at; /* the tag */
} fld;

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

static kp_status bad(const msg *m, kp_status st, const uint8_t *at, const char *adj,
                     const char *fmt, ...) KP__PRINTF(5, 6);
static kp_status bad(const msg *m, kp_status st, const uint8_t *at, const char *adj,
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

static kp_status oom(size_t n, size_t size) {
    return kp__error(KP_ERR_OUT_OF_MEMORY, "reading an ONNX model: no memory for %zu x %zu bytes",
                     n, size);
}

static void *zalloc(size_t n, size_t size) { return n ? kp__calloc(n, size) : NULL; }

#define ARRAY_OR_FAIL(p, n)                            \
    do {                                               \
        (p) = zalloc((n), sizeof *(p));                \
        if ((n) && !(p)) return oom((n), sizeof *(p)); \
    } while (0)

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

static kp_status check_kind(msg *m, const fld *f) {
    static const char *const want[] = {
        [K_INT] = "0",       [K_INTS] = "0 or 2", [K_F32] = "5", [K_F32S] = "5 or 2",
        [K_F64S] = "1 or 2", [K_LEN] = "2",       [K_NAME] = "2"};
    unsigned k = f->num < m->nspec ? m->spec[f->num].kind : K_NONE;
    bool ok = k == K_NONE || (k == K_INT && f->wt == 0) || (k == K_LEN && f->wt == 2) ||
              (k == K_NAME && f->wt == 2) || (k == K_INTS && (f->wt == 0 || f->wt == 2)) ||
              (k == K_F32 && f->wt == 5) ||
              (k == K_F32S && (f->wt == 5 || (f->wt == 2 && f->len % 4 == 0))) ||
              (k == K_F64S && (f->wt == 1 || (f->wt == 2 && f->len % 8 == 0)));
    char nb[64];
    if (!ok && f->wt == 2 && (k == K_F32S || k == K_F64S))
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "packed %s is %zu bytes, not whole values",
                   fname(m, f->num, nb, sizeof nb), f->len);
    if (!ok)
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "%s has wire type %u, expected %s",
                   fname(m, f->num, nb, sizeof nb), f->wt, want[k]);
    if (k != K_NONE) m->known = true;
    return KP_OK;
}

static const char *cut(msg *m, bool truncated) {
    m->trunc = truncated;
    return truncated ? "truncated" : "malformed";
}

/* The next field of m; *got is false at the end. */
static kp_status next(msg *m, fld *f, bool *got) {
    uint64_t tag, len;
    char nb[64];
    *got = false;
    if (m->p >= m->end) return KP_OK;
    f->at = m->p;
    if (!varint(&m->p, m->end, &tag))
        return bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                   "a field's tag runs past the end or is over 10 bytes");
    f->num = (uint32_t)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    if (f->num == 0 || tag >> 32)
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "field number %llu is out of range",
                   (unsigned long long)(tag >> 3));
    size_t left = (size_t)(m->end - m->p);
    f->data = m->p;
    f->len = 0;
    switch (f->wt) {
    case 0:
        if (!varint(&m->p, m->end, &f->v))
            return bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                       "the varint of %s runs past the end or is over 10 bytes",
                       fname(m, f->num, nb, sizeof nb));
        break;
    case 1:
    case 5:
        f->len = f->wt == 1 ? 8 : 4;
        if (left < f->len)
            return bad(m, KP_ERR_PARSE, f->at, cut(m, true), "%s needs %zu bytes, %zu are left",
                       fname(m, f->num, nb, sizeof nb), f->len, left);
        f->v = le(m->p, (unsigned)f->len);
        m->p += f->len;
        break;
    case 2:
        if (!varint(&m->p, m->end, &len))
            return bad(m, KP_ERR_PARSE, f->at, cut(m, m->p >= m->end),
                       "the length of %s runs past the end", fname(m, f->num, nb, sizeof nb));
        left = (size_t)(m->end - m->p);
        if (len > left)
            return bad(m, KP_ERR_PARSE, f->at, cut(m, true),
                       "%s has length %llu, which runs past the end (%zu bytes left)",
                       fname(m, f->num, nb, sizeof nb), (unsigned long long)len, left);
        f->data = m->p;
        f->len = (size_t)len;
        m->p += len;
        break;
    default:
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "%s has wire type %u%s",
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
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "packed %s ends inside a varint",
                   fname(m, f->num, nb, sizeof nb));
    }
    *n = c;
    return KP_OK;
}

/* The first pass: checks the level's structure and counts fields. */
static kp_status tally(msg *m) {
    fld f;
    bool got;
    memset(m->count, 0, sizeof m->count);
    for (;;) {
        KP_CHECK(next(m, &f, &got));
        if (!got) break;
        if (f.num >= NCOUNT) continue;
        unsigned k = f.num < m->nspec ? m->spec[f.num].kind : K_NONE;
        if (k == K_NAME) {
            m->name_at = f.data;
            m->name_len = f.len;
        }
        size_t n = 1;
        if (f.wt == 2 && k == K_INTS) KP_CHECK(count_packed(m, &f, &n));
        if (f.wt == 2 && k == K_F32S) n = f.len / 4;
        if (f.wt == 2 && k == K_F64S) n = f.len / 8;
        m->count[f.num] += n;
    }
    m->p = m->start;
    return KP_OK;
}

static void open_msg(msg *m, const msg *up, const uint8_t *data, size_t len, const char *kind,
                     const fspec *spec, size_t nspec, long index) {
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
#define OPEN(m, up, f, kind, spec, index)                                                    \
    open_msg((m), (up), (f)->data, (f)->len, (kind), (spec), sizeof(spec) / sizeof(spec)[0], \
             (index))

/* Iterates the varints of a field, packed or single. */
typedef struct vals {
    const uint8_t *p, *end;
    uint64_t one;
    bool single;
} vals;

static void vals_init(vals *it, const fld *f) {
    *it = (vals){.p = f->data, .end = f->data + f->len, .one = f->v, .single = f->wt != 2};
}

/* 1: *v holds the next value; 0: none left; -1: a bad varint. */
static int vals_next(vals *it, uint64_t *v) {
    if (it->single) {
        if (!it->end) return 0;
        it->end = NULL;
        *v = it->one;
        return 1;
    }
    if (it->p >= it->end) return 0;
    return varint(&it->p, it->end, v) ? 1 : -1;
}

/* Each element of a K_INTS field into dst[*k...], at most cap in all. */
static kp_status ints(msg *m, const fld *f, int64_t *dst, size_t cap, size_t *k) {
    vals it;
    uint64_t v;
    int r;
    vals_init(&it, f);
    while ((r = vals_next(&it, &v)) == 1) {
        if (*k < cap) dst[*k] = (int64_t)v;
        (*k)++;
    }
    if (r < 0) return bad(m, KP_ERR_PARSE, f->at, "malformed", "a packed varint is over 10 bytes");
    return KP_OK;
}

static kp_status str(msg *m, const fld *f, char **out) {
    char nb[64];
    if (f->len && memchr(f->data, 0, f->len))
        return bad(m, KP_ERR_PARSE, f->at, "malformed", "%s holds a NUL byte",
                   fname(m, f->num, nb, sizeof nb));
    char *s = kp__malloc(f->len + 1);
    if (!s) return oom(1, f->len + 1);
    if (f->len) memcpy(s, f->data, f->len);
    s[f->len] = '\0';
    kp__free(*out);
    *out = s;
    return KP_OK;
}

static kp_status str_default(char **s) {
    if (*s) return KP_OK;
    *s = kp__calloc(1, 1);
    return *s ? KP_OK : oom(1, 1);
}

/* --- TensorProto -------------------------------------------------------------- */

static const fspec tensor_spec[] = {
    [1] = {"dims", K_INTS},          [2] = {"data_type", K_INT},     [3] = {"segment", K_LEN},
    [4] = {"float_data", K_F32S},    [5] = {"int32_data", K_INTS},   [6] = {"string_data", K_LEN},
    [7] = {"int64_data", K_INTS},    [8] = {"name", K_NAME},         [9] = {"raw_data", K_LEN},
    [10] = {"double_data", K_F64S},  [11] = {"uint64_data", K_INTS}, [12] = {"doc_string", K_LEN},
    [13] = {"external_data", K_LEN}, [14] = {"data_location", K_INT}};

static const fspec entry_spec[] = {[1] = {"key", K_LEN}, [2] = {"value", K_LEN}};

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
        return bad(m, KP_ERR_PARSE, m->start, "malformed", "the value '%.*s' is not a whole number",
                   (int)(f->len < 40 ? f->len : 40), f->len ? (const char *)f->data : "");
    *out = x;
    return KP_OK;
}

/* One external_data entry: location, offset or length (others are ignored). */
static kp_status ext_entry(const msg *up, const fld *fe, tinfo *ti) {
    msg m;
    fld f, key = {0}, val = {0};
    bool got;
    OPEN(&m, up, fe, "StringStringEntryProto", entry_spec, -1);
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) key = f;
        if (f.num == 2) val = f;
    }
    m.name = "external_data";
    if (span_is(&key, "location")) return str(&m, &val, &ti->location);
    if (span_is(&key, "offset")) return number(&m, &val, &ti->offset);
    if (span_is(&key, "length")) return number(&m, &val, &ti->length);
    return KP_OK;
}

static kp_status tensor_fields(msg *m, kp__ox_tensor *t, tinfo *ti) {
    fld f;
    bool got;
    for (;;) {
        KP_CHECK(next(m, &f, &got));
        if (!got) return KP_OK;
        switch (f.num) {
        case 1: KP_CHECK(ints(m, &f, t->shape, KP_MAX_DIMS, &ti->rank)); break;
        case 2: t->onnx_type = (int)(int32_t)f.v; break;
        case 3: return bad(m, KP_ERR_UNSUPPORTED, f.at, "", "segmented tensors are not supported");
        case 8:
            KP_CHECK(str(m, &f, &t->name));
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

static void shape_str(const kp__ox_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static kp_status mismatch(const msg *m, const kp__ox_tensor *t, const char *what, size_t have,
                          const char *unit, size_t need) {
    char sh[160];
    shape_str(t, sh, sizeof sh);
    return bad(m, KP_ERR_PARSE, m->start, "malformed",
               "%s holds %zu %s; its dims %s of %s need %zu", what, have, unit, sh,
               kp__ox_type_name(t->onnx_type), need);
}

/* The typed field that holds a kpipe dtype's elements in a file. */
static uint32_t typed_field(int onnx_type) {
    switch (onnx_type) {
    case KP__OX_FLOAT: return 4;
    case KP__OX_INT64: return 7;
    case KP__OX_UINT64: return 11;
    default: return 5;
    }
}

static void put(uint8_t *dst, size_t k, int onnx_type, uint64_t v) {
    switch (onnx_type) {
    case KP__OX_INT64:
    case KP__OX_UINT64:
        for (unsigned i = 0; i < 8; i++) dst[8 * k + i] = (uint8_t)(v >> (8 * i));
        break;
    case KP__OX_INT32:
        for (unsigned i = 0; i < 4; i++) dst[4 * k + i] = (uint8_t)(v >> (8 * i));
        break;
    case KP__OX_INT16:
    case KP__OX_FLOAT16:
    case KP__OX_BFLOAT16:
        dst[2 * k] = (uint8_t)v;
        dst[2 * k + 1] = (uint8_t)(v >> 8);
        break;
    case KP__OX_BOOL: dst[k] = (uint32_t)v != 0; break;
    default: dst[k] = (uint8_t)v; break;
    }
}

/* The third pass of a tensor whose elements are in a typed field. */
static kp_status typed(msg *m, kp__ox_tensor *t, size_t bytes) {
    uint32_t num = typed_field(t->onnx_type);
    size_t k = 0, have = m->count[num];
    fld f;
    bool got;
    if (have != (size_t)t->numel)
        return mismatch(m, t, tensor_spec[num].name, have, "elements", (size_t)t->numel);
    if (!have) return KP_OK;
    uint8_t *dst = t->data = kp__malloc(bytes);
    if (!dst) return oom(1, bytes);
    t->bytes = bytes;
    for (m->p = m->start;;) {
        KP_CHECK(next(m, &f, &got));
        if (!got) break;
        if (f.num != num) continue;
        if (num == 4 && f.wt == 2 && k + f.len / 4 <= have) {
            memcpy(dst + 4 * k, f.data, f.len); /* both little-endian */
            k += f.len / 4;
            continue;
        }
        if (num == 4) {
            if (k < have) memcpy(dst + 4 * k, f.data, 4);
            k++;
            continue;
        }
        vals it;
        uint64_t v;
        int r;
        vals_init(&it, &f);
        for (; (r = vals_next(&it, &v)) == 1; k++)
            if (k < have) put(dst, k, t->onnx_type, v);
        if (r < 0)
            return bad(m, KP_ERR_PARSE, f.at, "malformed", "a packed varint is over 10 bytes");
    }
    return KP_OK;
}

static kp_status tensor_data(msg *m, kp__ox_tensor *t, tinfo *ti) {
    t->dtype_ok = kp__ox_dtype(t->onnx_type, &t->dtype);
    if (!t->dtype_ok) return KP_OK;
    size_t es = kp_dtype_size(t->dtype), bytes = (size_t)t->numel * es;
    if ((uint64_t)t->numel > KP__MAX_ALLOC_BYTES / es)
        return bad(m, KP_ERR_PARSE, m->start, "malformed", "%lld elements are too many",
                   (long long)t->numel);
    if (ti->external) {
        if (!ti->location)
            return bad(m, KP_ERR_PARSE, m->start, "malformed", "external data without a location");
        if (!m->dir)
            return bad(m, KP_ERR_UNSUPPORTED, m->start, "",
                       "its data is in file '%.200s', and a model read from memory has no folder "
                       "to find it in",
                       ti->location);
        KP_CHECK(kp__ox_external_read(m->dir, t->name, ti->location, ti->offset, ti->length, bytes,
                                      &t->data));
        t->bytes = bytes;
    } else if (ti->has_raw) {
        if (ti->raw_len != bytes) return mismatch(m, t, "raw_data", ti->raw_len, "bytes", bytes);
        if (bytes && !(t->data = kp__malloc(bytes))) return oom(1, bytes);
        if (bytes) memcpy(t->data, ti->raw, bytes);
        t->bytes = bytes;
    } else {
        KP_CHECK(typed(m, t, bytes));
    }
    if (t->onnx_type == KP__OX_BOOL)
        for (size_t i = 0; i < t->bytes; i++)
            ((uint8_t *)t->data)[i] = ((uint8_t *)t->data)[i] != 0;
    return KP_OK;
}

/* The body of a TensorProto, on an opened message. */
static kp_status tensor_body(msg *m, kp__ox_tensor *t) {
    tinfo ti = {.length = UINT64_MAX};
    KP_CHECK(tally(m));
    kp_status st = tensor_fields(m, t, &ti);
    if (st == KP_OK) st = str_default(&t->name);
    if (st == KP_OK && ti.rank > KP_MAX_DIMS)
        st = bad(m, KP_ERR_UNSUPPORTED, m->start, "",
                 "rank %zu is over the %d dimensions kpipe holds", ti.rank, KP_MAX_DIMS);
    t->ndim = (int)(ti.rank > KP_MAX_DIMS ? 0 : ti.rank);
    t->numel = 1;
    for (int i = 0; st == KP_OK && i < t->ndim; i++) {
        if (t->shape[i] < 0)
            st = bad(m, KP_ERR_PARSE, m->start, "malformed", "dims[%d] = %lld is negative", i,
                     (long long)t->shape[i]);
        else if (t->shape[i] && t->numel > INT64_MAX / t->shape[i])
            st = bad(m, KP_ERR_PARSE, m->start, "malformed", "the product of its dims overflows");
        else
            t->numel *= t->shape[i];
    }
    if (st == KP_OK) st = tensor_data(m, t, &ti);
    kp__free(ti.location);
    return st;
}

static kp_status tensor(const msg *up, const fld *f, long index, kp__ox_tensor *t) {
    msg m;
    OPEN(&m, up, f, "TensorProto", tensor_spec, index);
    return tensor_body(&m, t);
}

kp_status kp__ox_decode_tensor(const uint8_t *buf, size_t len, kp__ox_tensor *t) {
    msg m;
    open_msg(&m, NULL, buf, len, "TensorProto", tensor_spec,
             sizeof tensor_spec / sizeof tensor_spec[0], -1);
    return tensor_body(&m, t);
}

/* --- AttributeProto ----------------------------------------------------------- */

static const fspec attr_spec[] = {[1] = {"name", K_NAME},
                                  [2] = {"f", K_F32},
                                  [3] = {"i", K_INT},
                                  [4] = {"s", K_LEN},
                                  [5] = {"t", K_LEN},
                                  [6] = {"g", K_LEN},
                                  [7] = {"floats", K_F32S},
                                  [8] = {"ints", K_INTS},
                                  [9] = {"strings", K_LEN},
                                  [10] = {"tensors", K_LEN},
                                  [11] = {"graphs", K_LEN},
                                  [13] = {"doc_string", K_LEN},
                                  [14] = {"tp", K_LEN},
                                  [15] = {"type_protos", K_LEN},
                                  [20] = {"type", K_INT},
                                  [21] = {"ref_attr_name", K_LEN},
                                  [22] = {"sparse_tensor", K_LEN},
                                  [23] = {"sparse_tensors", K_LEN}};

/* Old files leave `type` out: the one value field present says it. */
static kp_status attr_type(const msg *m, kp__ox_attr *a) {
    static const int by_field[][2] = {{2, 1},   {3, 2},   {4, 3},   {5, 4},  {6, 5},
                                      {7, 6},   {8, 7},   {9, 8},   {10, 9}, {11, 10},
                                      {22, 11}, {23, 12}, {14, 13}, {15, 14}};
    int found = 0;
    if (m->count[20]) return KP_OK;
    for (size_t i = 0; i < sizeof by_field / sizeof by_field[0]; i++)
        if (m->count[by_field[i][0]]) {
            if (found++)
                return bad(m, KP_ERR_PARSE, m->start, "malformed",
                           "no type field, and values of several types");
            a->type = by_field[i][1];
        }
    return KP_OK;
}

static kp_status attr_field(msg *m, const fld *f, kp__ox_attr *a, size_t *k) {
    uint32_t bits;
    switch (f->num) {
    case 1:
        KP_CHECK(str(m, f, &a->name));
        m->name = a->name;
        break;
    case 2:
        bits = (uint32_t)f->v;
        memcpy(&a->f, &bits, 4);
        break;
    case 3: a->i = (int64_t)f->v; break;
    case 4:
        KP_CHECK(str(m, f, &a->s));
        a->s_len = f->len;
        break;
    case 5:
        if (a->t)
            kp__ox_tensor_clear(a->t);
        else if (!(a->t = kp__calloc(1, sizeof *a->t)))
            return oom(1, sizeof *a->t);
        memset(a->t, 0, sizeof *a->t);
        return tensor(m, f, -1, a->t);
    case 7:
        for (size_t j = 0; j < (f->wt == 2 ? f->len / 4 : 1); j++, k[0]++) {
            bits = (uint32_t)(f->wt == 2 ? le(f->data + 4 * j, 4) : f->v);
            memcpy(&a->floats[k[0]], &bits, 4);
        }
        break;
    case 8: return ints(m, f, a->ints, m->count[8], &k[1]);
    case 9: return str(m, f, &a->strings[k[2]++]);
    case 20: a->type = (int)(int32_t)f->v; break;
    default: break;
    }
    return KP_OK;
}

static kp_status attribute(const msg *up, const fld *fa, long index, kp__ox_attr *a) {
    msg m;
    fld f;
    bool got;
    size_t k[3] = {0, 0, 0}; /* floats, ints, strings so far */
    OPEN(&m, up, fa, "AttributeProto", attr_spec, index);
    KP_CHECK(tally(&m));
    ARRAY_OR_FAIL(a->floats, m.count[7]);
    ARRAY_OR_FAIL(a->ints, m.count[8]);
    ARRAY_OR_FAIL(a->strings, m.count[9]);
    a->n = m.count[9]; /* until the type is known, n is what frees the strings */
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        KP_CHECK(attr_field(&m, &f, a, k));
    }
    KP_CHECK(str_default(&a->name));
    KP_CHECK(attr_type(&m, a));
    if (a->type != KP__OX_ATTR_STRINGS) {
        for (size_t i = 0; i < a->n; i++) kp__free(a->strings[i]);
        kp__free(a->strings);
        a->strings = NULL;
        a->n = 0;
    }
    if (a->type != KP__OX_ATTR_FLOATS) kp__free(a->floats), a->floats = NULL;
    if (a->type != KP__OX_ATTR_INTS) kp__free(a->ints), a->ints = NULL;
    if (a->type != KP__OX_ATTR_TENSOR && a->t)
        kp__ox_tensor_clear(a->t), kp__free(a->t), a->t = NULL;
    if (a->type == KP__OX_ATTR_FLOATS) a->n = k[0];
    if (a->type == KP__OX_ATTR_INTS) a->n = k[1];
    return KP_OK;
}

/* --- ValueInfoProto and its type --------------------------------------------- */

static const fspec vi_spec[] = {
    [1] = {"name", K_NAME}, [2] = {"type", K_LEN}, [3] = {"doc_string", K_LEN}};
static const fspec type_spec[] = {
    [1] = {"tensor_type", K_LEN},        [4] = {"sequence_type", K_LEN},
    [5] = {"map_type", K_LEN},           [6] = {"denotation", K_LEN},
    [8] = {"sparse_tensor_type", K_LEN}, [9] = {"optional_type", K_LEN}};
static const fspec ttype_spec[] = {[1] = {"elem_type", K_INT}, [2] = {"shape", K_LEN}};
static const fspec shape_spec[] = {[1] = {"dim", K_LEN}};
static const fspec dim_spec[] = {
    [1] = {"dim_value", K_INT}, [2] = {"dim_param", K_LEN}, [3] = {"denotation", K_LEN}};

static kp_status dim(const msg *up, const fld *fd, long index, kp__ox_dim *d) {
    msg m;
    fld f;
    bool got;
    OPEN(&m, up, fd, "TensorShapeProto.Dimension", dim_spec, index);
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) return KP_OK;
        if (f.num == 1) {
            /* Some exporters write -1 for a dimension they do not know. */
            d->value = (int64_t)f.v >= 0 ? (int64_t)f.v : -1;
            kp__free(d->param);
            d->param = NULL;
        } else if (f.num == 2) {
            KP_CHECK(str(&m, &f, &d->param));
            d->value = -1;
        }
    }
}

static kp_status shape(const msg *up, const fld *fs, kp__ox_value_info *v) {
    msg m;
    fld f;
    bool got;
    OPEN(&m, up, fs, "TensorShapeProto", shape_spec, -1);
    KP_CHECK(tally(&m));
    if (m.count[1] > KP_MAX_DIMS)
        return bad(&m, KP_ERR_UNSUPPORTED, m.start, "",
                   "rank %zu is over the %d dimensions kpipe holds", m.count[1], KP_MAX_DIMS);
    for (int i = 0; i < KP_MAX_DIMS; i++) {
        kp__free(v->dims[i].param);
        v->dims[i] = (kp__ox_dim){.value = -1, .param = NULL};
    }
    v->has_shape = true;
    v->ndim = 0;
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
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
        OPEN(&m, up, ft, "TypeProto.Tensor", ttype_spec, -1);
    else
        OPEN(&m, up, ft, "TypeProto", type_spec, -1);
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) return KP_OK;
        if (!tensor_level && f.num == 1) KP_CHECK(type_proto(&m, &f, true, v));
        if (tensor_level && f.num == 1) v->onnx_type = (int)(int32_t)f.v;
        if (tensor_level && f.num == 2) KP_CHECK(shape(&m, &f, v));
    }
}

static kp_status value_info(const msg *up, const fld *fv, long index, kp__ox_value_info *v) {
    msg m;
    fld f;
    bool got;
    OPEN(&m, up, fv, "ValueInfoProto", vi_spec, index);
    for (int i = 0; i < KP_MAX_DIMS; i++) v->dims[i].value = -1;
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) {
            KP_CHECK(str(&m, &f, &v->name));
            m.name = v->name;
        }
        if (f.num == 2) KP_CHECK(type_proto(&m, &f, false, v));
    }
    return str_default(&v->name);
}

/* --- NodeProto, GraphProto, ModelProto ---------------------------------------- */

static const fspec node_spec[] = {
    [1] = {"input", K_LEN},   [2] = {"output", K_LEN},    [3] = {"name", K_NAME},
    [4] = {"op_type", K_LEN}, [5] = {"attribute", K_LEN}, [6] = {"doc_string", K_LEN},
    [7] = {"domain", K_LEN}};

static kp_status node(const msg *up, const fld *fn, long index, kp__ox_node *n) {
    msg m;
    fld f;
    bool got;
    size_t ki = 0, ko = 0, ka = 0;
    OPEN(&m, up, fn, "NodeProto", node_spec, index);
    KP_CHECK(tally(&m));
    ARRAY_OR_FAIL(n->inputs, m.count[1]);
    n->n_inputs = m.count[1];
    ARRAY_OR_FAIL(n->outputs, m.count[2]);
    n->n_outputs = m.count[2];
    ARRAY_OR_FAIL(n->attrs, m.count[5]);
    n->n_attrs = m.count[5];
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        switch (f.num) {
        case 1: KP_CHECK(str(&m, &f, &n->inputs[ki++])); break;
        case 2: KP_CHECK(str(&m, &f, &n->outputs[ko++])); break;
        case 3:
            KP_CHECK(str(&m, &f, &n->name));
            m.name = n->name;
            break;
        case 4: KP_CHECK(str(&m, &f, &n->op_type)); break;
        case 5:
            KP_CHECK(attribute(&m, &f, (long)ka, &n->attrs[ka]));
            ka++;
            break;
        case 7: KP_CHECK(str(&m, &f, &n->domain)); break;
        default: break;
        }
    }
    KP_CHECK(str_default(&n->name));
    KP_CHECK(str_default(&n->op_type));
    return str_default(&n->domain);
}

static const fspec graph_spec[] = {[1] = {"node", K_LEN},
                                   [2] = {"name", K_NAME},
                                   [5] = {"initializer", K_LEN},
                                   [10] = {"doc_string", K_LEN},
                                   [11] = {"input", K_LEN},
                                   [12] = {"output", K_LEN},
                                   [13] = {"value_info", K_LEN},
                                   [14] = {"quantization_annotation", K_LEN},
                                   [15] = {"sparse_initializer", K_LEN}};
static const fspec sparse_spec[] = {
    [1] = {"values", K_LEN}, [2] = {"indices", K_LEN}, [3] = {"dims", K_INTS}};

/* Sparse initializers are refused, naming the first by its values' name. */
static kp_status sparse(const msg *up, const fld *fs) {
    msg m, v;
    fld f, fv;
    bool got;
    char *name = NULL;
    OPEN(&m, up, fs, "SparseTensorProto", sparse_spec, -1);
    for (kp_status st;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        if (f.num != 1) continue;
        OPEN(&v, &m, &f, "TensorProto", tensor_spec, -1);
        while ((st = next(&v, &fv, &got)) == KP_OK && got)
            if (fv.num == 8 && (st = str(&v, &fv, &name)) != KP_OK) break;
        if (st != KP_OK) {
            kp__free(name);
            return st;
        }
    }
    kp_status st = bad(up, KP_ERR_UNSUPPORTED, fs->at, "",
                       "sparse initializer '%.200s' is not supported", name ? name : "");
    kp__free(name);
    return st;
}

static kp_status graph_arrays(const msg *m, kp__ox_model *mo) {
    ARRAY_OR_FAIL(mo->nodes, m->count[1]);
    mo->n_nodes = m->count[1];
    ARRAY_OR_FAIL(mo->inits, m->count[5]);
    mo->n_inits = m->count[5];
    ARRAY_OR_FAIL(mo->inputs, m->count[11]);
    mo->n_inputs = m->count[11];
    ARRAY_OR_FAIL(mo->outputs, m->count[12]);
    mo->n_outputs = m->count[12];
    ARRAY_OR_FAIL(mo->value_info, m->count[13]);
    mo->n_value_info = m->count[13];
    return KP_OK;
}

static kp_status graph(const msg *up, const fld *fg, kp__ox_model *mo) {
    msg m;
    fld f;
    bool got;
    size_t k[16] = {0};
    OPEN(&m, up, fg, "GraphProto", graph_spec, -1);
    KP_CHECK(tally(&m));
    KP_CHECK(graph_arrays(&m, mo));
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        long i = f.num < 16 ? (long)k[f.num]++ : -1;
        switch (f.num) {
        case 1: KP_CHECK(node(&m, &f, i, &mo->nodes[i])); break;
        case 2:
            KP_CHECK(str(&m, &f, &mo->graph_name));
            m.name = mo->graph_name;
            break;
        case 5: KP_CHECK(tensor(&m, &f, i, &mo->inits[i])); break;
        case 11: KP_CHECK(value_info(&m, &f, i, &mo->inputs[i])); break;
        case 12: KP_CHECK(value_info(&m, &f, i, &mo->outputs[i])); break;
        case 13: KP_CHECK(value_info(&m, &f, i, &mo->value_info[i])); break;
        case 15: return sparse(&m, &f);
        default: break;
        }
    }
    return str_default(&mo->graph_name);
}

static const fspec opset_spec[] = {[1] = {"domain", K_LEN}, [2] = {"version", K_INT}};
static const fspec model_spec[] = {[1] = {"ir_version", K_INT},
                                   [2] = {"producer_name", K_LEN},
                                   [3] = {"producer_version", K_LEN},
                                   [4] = {"domain", K_LEN},
                                   [5] = {"model_version", K_INT},
                                   [6] = {"doc_string", K_LEN},
                                   [7] = {"graph", K_LEN},
                                   [8] = {"opset_import", K_LEN},
                                   [14] = {"metadata_props", K_LEN},
                                   [20] = {"training_info", K_LEN},
                                   [25] = {"functions", K_LEN}};

static kp_status opset(const msg *up, const fld *fo, long index, kp__ox_opset *o) {
    msg m;
    fld f;
    bool got;
    OPEN(&m, up, fo, "OperatorSetIdProto", opset_spec, index);
    for (;;) {
        KP_CHECK(next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) KP_CHECK(str(&m, &f, &o->domain));
        if (f.num == 2) o->version = (int64_t)f.v;
    }
    return str_default(&o->domain);
}

static kp_status model_fields(msg *m, kp__ox_model *mo) {
    fld f;
    bool got;
    size_t ko = 0;
    for (;;) {
        KP_CHECK(next(m, &f, &got));
        if (!got) return KP_OK;
        switch (f.num) {
        case 1: mo->ir_version = (int64_t)f.v; break;
        case 2: KP_CHECK(str(m, &f, &mo->producer)); break;
        case 7: KP_CHECK(graph(m, &f, mo)); break;
        case 8:
            KP_CHECK(opset(m, &f, (long)ko, &mo->opsets[ko]));
            ko++;
            break;
        default: break;
        }
    }
}

kp_status kp__ox_decode_model(const uint8_t *buf, size_t len, const char *dir, kp__ox_model *mo) {
    msg m;
    open_msg(&m, NULL, buf, len, "ModelProto", model_spec, sizeof model_spec / sizeof model_spec[0],
             -1);
    m.dir = dir;
    if (len == 0) return kp__error(KP_ERR_PARSE, "not an ONNX model file: it is empty");
    kp_status st = tally(&m);
    /* A failure at the top level that is not a known field cut short: the
     * bytes are not protobuf, or not this message (text, JSON, a tensor). */
    if (st != KP_OK)
        return m.known && m.trunc ? st : kp__error_prefix(st, "not an ONNX model file");
    if (m.count[7] == 0)
        return kp__error(KP_ERR_PARSE, "not an ONNX model: the ModelProto has no graph (field 7)");
    if (m.count[7] > 1)
        return bad(&m, KP_ERR_PARSE, m.start, "malformed", "%zu graphs; a model has one",
                   m.count[7]);
    ARRAY_OR_FAIL(mo->opsets, m.count[8]);
    mo->n_opsets = m.count[8];
    KP_CHECK(model_fields(&m, mo));
    KP_CHECK(str_default(&mo->producer));
    if (mo->n_opsets == 0 && mo->ir_version >= 3)
        return kp__error(KP_ERR_PARSE,
                         "not an ONNX model: IR version %lld and no opset_import (field 8)",
                         (long long)mo->ir_version);
    return KP_OK;
}
