/* ONNX's protobuf wire format, and the graph's structure decoded with it:
 * ModelProto, GraphProto, NodeProto, AttributeProto (the messages that
 * describe a tensor, TensorProto and ValueInfoProto, are in reader.c).
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
 * by the code rather than by the file. Every fault names the message (by
 * its name, or its place and the nearest named message around it), the
 * field and the byte offset. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reader-impl.h"

/* Short names for the cursor's types, as in reader.c. */
typedef kp__ox_pb_msg msg;
typedef kp__ox_pb_field fld;

bool kp__ox_dtype(int onnx_type, kp_dtype *out) {
    kp_dtype dt;
    switch (onnx_type) {
    case KP__OX_FLOAT: dt = KP_F32; break;
    case KP__OX_UINT8: dt = KP_U8; break;
    case KP__OX_INT8: dt = KP_I8; break;
    case KP__OX_INT16: dt = KP_I16; break;
    case KP__OX_INT32: dt = KP_I32; break;
    case KP__OX_INT64: dt = KP_I64; break;
    case KP__OX_BOOL: dt = KP_U8; break;
    case KP__OX_FLOAT16: dt = KP_F16; break;
    case KP__OX_BFLOAT16: dt = KP_BF16; break;
    case KP__OX_UINT64: dt = KP_U64; break;
    default: return false;
    }
    if (out) *out = dt;
    return true;
}

const char *kp__ox_type_name(int onnx_type) {
    static const char *const names[] = {
        "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
        "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
        "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4",     "FLOAT4E2M1"};
    static _Thread_local char other[24];
    if (onnx_type >= 0 && (size_t)onnx_type < sizeof names / sizeof names[0])
        return names[onnx_type];
    snprintf(other, sizeof other, "type %d", onnx_type);
    return other;
}

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

static void *zalloc(size_t n, size_t size) { return n ? kp__calloc(n, size) : NULL; }

#define ARRAY_OR_FAIL(p, n)                                      \
    do {                                                         \
        (p) = zalloc((n), sizeof *(p));                          \
        if ((n) && !(p)) return kp__ox_pb_oom((n), sizeof *(p)); \
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

/* --- AttributeProto ----------------------------------------------------------- */

/* clang-format off */
static const kp__ox_pb_fspec attr_spec[] = {
    [1] = {"name", KP__OX_PB_NAME}, [2] = {"f", KP__OX_PB_F32},
    [3] = {"i", KP__OX_PB_INT}, [4] = {"s", KP__OX_PB_LEN},
    [5] = {"t", KP__OX_PB_LEN}, [6] = {"g", KP__OX_PB_LEN},
    [7] = {"floats", KP__OX_PB_F32S}, [8] = {"ints", KP__OX_PB_INTS},
    [9] = {"strings", KP__OX_PB_LEN}, [10] = {"tensors", KP__OX_PB_LEN},
    [11] = {"graphs", KP__OX_PB_LEN}, [13] = {"doc_string", KP__OX_PB_LEN},
    [14] = {"tp", KP__OX_PB_LEN}, [15] = {"type_protos", KP__OX_PB_LEN},
    [20] = {"type", KP__OX_PB_INT}, [21] = {"ref_attr_name", KP__OX_PB_LEN},
    [22] = {"sparse_tensor", KP__OX_PB_LEN}, [23] = {"sparse_tensors", KP__OX_PB_LEN}};
/* clang-format on */

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
                return kp__ox_pb_bad(m, KP_ERR_PARSE, m->start, "malformed",
                                     "no type field, and values of several types");
            a->type = by_field[i][1];
        }
    return KP_OK;
}

static kp_status attr_field(msg *m, const fld *f, kp__ox_attr *a, size_t *k) {
    uint32_t bits;
    switch (f->num) {
    case 1:
        KP_CHECK(kp__ox_pb_str(m, f, &a->name));
        m->name = a->name;
        break;
    case 2:
        bits = (uint32_t)f->v;
        memcpy(&a->f, &bits, 4);
        break;
    case 3: a->i = (int64_t)f->v; break;
    case 4:
        KP_CHECK(kp__ox_pb_str(m, f, &a->s));
        a->s_len = f->len;
        break;
    case 5:
        if (a->t)
            kp__ox_tensor_clear(a->t);
        else if (!(a->t = kp__calloc(1, sizeof *a->t)))
            return kp__ox_pb_oom(1, sizeof *a->t);
        memset(a->t, 0, sizeof *a->t);
        return kp__ox_decode_tensor(m, f, -1, a->t);
    case 7:
        for (size_t j = 0; j < (f->wt == 2 ? f->len / 4 : 1); j++, k[0]++) {
            bits = (uint32_t)(f->wt == 2 ? le(f->data + 4 * j, 4) : f->v);
            memcpy(&a->floats[k[0]], &bits, 4);
        }
        break;
    case 8: return kp__ox_pb_ints(m, f, a->ints, m->count[8], &k[1]);
    case 9: return kp__ox_pb_str(m, f, &a->strings[k[2]++]);
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
    KP__OX_PB_OPEN(&m, up, fa, "AttributeProto", attr_spec, index);
    KP_CHECK(kp__ox_pb_tally(&m));
    ARRAY_OR_FAIL(a->floats, m.count[7]);
    ARRAY_OR_FAIL(a->ints, m.count[8]);
    ARRAY_OR_FAIL(a->strings, m.count[9]);
    a->n = m.count[9]; /* until the type is known, n is what frees the strings */
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        KP_CHECK(attr_field(&m, &f, a, k));
    }
    KP_CHECK(kp__ox_pb_str_default(&a->name));
    KP_CHECK(attr_type(&m, a));
    /* Only the type's own list is kept. */
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

/* --- NodeProto, GraphProto, ModelProto ---------------------------------------- */

/* clang-format off */
static const kp__ox_pb_fspec node_spec[] = {
    [1] = {"input", KP__OX_PB_LEN}, [2] = {"output", KP__OX_PB_LEN},
    [3] = {"name", KP__OX_PB_NAME}, [4] = {"op_type", KP__OX_PB_LEN},
    [5] = {"attribute", KP__OX_PB_LEN}, [6] = {"doc_string", KP__OX_PB_LEN},
    [7] = {"domain", KP__OX_PB_LEN}};
/* clang-format on */

static kp_status node(const msg *up, const fld *fn, long index, kp__ox_node *n) {
    msg m;
    fld f;
    bool got;
    size_t ki = 0, ko = 0, ka = 0;
    KP__OX_PB_OPEN(&m, up, fn, "NodeProto", node_spec, index);
    KP_CHECK(kp__ox_pb_tally(&m));
    ARRAY_OR_FAIL(n->inputs, m.count[1]);
    n->n_inputs = m.count[1];
    ARRAY_OR_FAIL(n->outputs, m.count[2]);
    n->n_outputs = m.count[2];
    ARRAY_OR_FAIL(n->attrs, m.count[5]);
    n->n_attrs = m.count[5];
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        switch (f.num) {
        case 1: KP_CHECK(kp__ox_pb_str(&m, &f, &n->inputs[ki++])); break;
        case 2: KP_CHECK(kp__ox_pb_str(&m, &f, &n->outputs[ko++])); break;
        case 3:
            KP_CHECK(kp__ox_pb_str(&m, &f, &n->name));
            m.name = n->name;
            break;
        case 4: KP_CHECK(kp__ox_pb_str(&m, &f, &n->op_type)); break;
        case 5:
            KP_CHECK(attribute(&m, &f, (long)ka, &n->attrs[ka]));
            ka++;
            break;
        case 7: KP_CHECK(kp__ox_pb_str(&m, &f, &n->domain)); break;
        default: break;
        }
    }
    KP_CHECK(kp__ox_pb_str_default(&n->name));
    KP_CHECK(kp__ox_pb_str_default(&n->op_type));
    return kp__ox_pb_str_default(&n->domain);
}

/* clang-format off */
static const kp__ox_pb_fspec graph_spec[] = {
    [1] = {"node", KP__OX_PB_LEN}, [2] = {"name", KP__OX_PB_NAME},
    [5] = {"initializer", KP__OX_PB_LEN}, [10] = {"doc_string", KP__OX_PB_LEN},
    [11] = {"input", KP__OX_PB_LEN}, [12] = {"output", KP__OX_PB_LEN},
    [13] = {"value_info", KP__OX_PB_LEN}, [14] = {"quantization_annotation", KP__OX_PB_LEN},
    [15] = {"sparse_initializer", KP__OX_PB_LEN}};
static const kp__ox_pb_fspec sparse_values_spec[] = {
    [8] = {"name", KP__OX_PB_NAME}};
static const kp__ox_pb_fspec sparse_spec[] = {
    [1] = {"values", KP__OX_PB_LEN}, [2] = {"indices", KP__OX_PB_LEN},
    [3] = {"dims", KP__OX_PB_INTS}};
/* clang-format on */

/* Sparse initializers are refused, naming the first by its values' name. */
static kp_status sparse(const msg *up, const fld *fs) {
    msg m, v = {.name_len = 0};
    fld f;
    bool got;
    kp_status st;
    KP__OX_PB_OPEN(&m, up, fs, "SparseTensorProto", sparse_spec, -1);
    while ((st = kp__ox_pb_next(&m, &f, &got)) == KP_OK && got && f.num != 1) continue;
    if (st == KP_OK && got) {
        KP__OX_PB_OPEN(&v, &m, &f, "TensorProto", sparse_values_spec, -1);
        st = kp__ox_pb_tally(&v);
    }
    if (st != KP_OK) return st;
    return kp__ox_pb_bad(
        up, KP_ERR_UNSUPPORTED, fs->at, "", "sparse initializer '%.*s' is not supported",
        (int)(v.name_len < 200 ? v.name_len : 200), v.name_len ? (const char *)v.name_at : "");
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
    KP__OX_PB_OPEN(&m, up, fg, "GraphProto", graph_spec, -1);
    KP_CHECK(kp__ox_pb_tally(&m));
    KP_CHECK(graph_arrays(&m, mo));
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        long i = f.num < 16 ? (long)k[f.num]++ : -1;
        switch (f.num) {
        case 1: KP_CHECK(node(&m, &f, i, &mo->nodes[i])); break;
        case 2:
            KP_CHECK(kp__ox_pb_str(&m, &f, &mo->graph_name));
            m.name = mo->graph_name;
            break;
        case 5: KP_CHECK(kp__ox_decode_tensor(&m, &f, i, &mo->inits[i])); break;
        case 11: KP_CHECK(kp__ox_decode_value_info(&m, &f, i, &mo->inputs[i])); break;
        case 12: KP_CHECK(kp__ox_decode_value_info(&m, &f, i, &mo->outputs[i])); break;
        case 13: KP_CHECK(kp__ox_decode_value_info(&m, &f, i, &mo->value_info[i])); break;
        case 15: return sparse(&m, &f);
        default: break;
        }
    }
    return kp__ox_pb_str_default(&mo->graph_name);
}

/* clang-format off */
static const kp__ox_pb_fspec opset_spec[] = {
    [1] = {"domain", KP__OX_PB_LEN}, [2] = {"version", KP__OX_PB_INT}};
static const kp__ox_pb_fspec model_spec[] = {
    [1] = {"ir_version", KP__OX_PB_INT}, [2] = {"producer_name", KP__OX_PB_LEN},
    [3] = {"producer_version", KP__OX_PB_LEN}, [4] = {"domain", KP__OX_PB_LEN},
    [5] = {"model_version", KP__OX_PB_INT}, [6] = {"doc_string", KP__OX_PB_LEN},
    [7] = {"graph", KP__OX_PB_LEN}, [8] = {"opset_import", KP__OX_PB_LEN},
    [14] = {"metadata_props", KP__OX_PB_LEN}, [20] = {"training_info", KP__OX_PB_LEN},
    [25] = {"functions", KP__OX_PB_LEN}};
/* clang-format on */

static kp_status opset(const msg *up, const fld *fo, long index, kp__ox_opset *o) {
    msg m;
    fld f;
    bool got;
    KP__OX_PB_OPEN(&m, up, fo, "OperatorSetIdProto", opset_spec, index);
    for (;;) {
        KP_CHECK(kp__ox_pb_next(&m, &f, &got));
        if (!got) break;
        if (f.num == 1) KP_CHECK(kp__ox_pb_str(&m, &f, &o->domain));
        if (f.num == 2) o->version = (int64_t)f.v;
    }
    return kp__ox_pb_str_default(&o->domain);
}

static kp_status model_fields(msg *m, kp__ox_model *mo) {
    fld f;
    bool got;
    size_t ko = 0;
    for (;;) {
        KP_CHECK(kp__ox_pb_next(m, &f, &got));
        if (!got) return KP_OK;
        switch (f.num) {
        case 1: mo->ir_version = (int64_t)f.v; break;
        case 2: KP_CHECK(kp__ox_pb_str(m, &f, &mo->producer)); break;
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
    kp__ox_pb_open(&m, NULL, buf, len, "ModelProto", model_spec,
                   sizeof model_spec / sizeof model_spec[0], -1);
    m.dir = dir;
    if (len == 0) return kp__error(KP_ERR_PARSE, "not an ONNX model file: it is empty");
    kp_status st = kp__ox_pb_tally(&m);
    /* A failure at the top level that is not a known field cut short: the
     * bytes are not protobuf, or not this message (text, JSON, a tensor). */
    if (st != KP_OK)
        return m.known && m.trunc ? st : kp__error_prefix(st, "not an ONNX model file");
    if (m.count[7] == 0)
        return kp__error(KP_ERR_PARSE, "not an ONNX model: the ModelProto has no graph (field 7)");
    if (m.count[7] > 1)
        return kp__ox_pb_bad(&m, KP_ERR_PARSE, m.start, "malformed", "%zu graphs; a model has one",
                             m.count[7]);
    ARRAY_OR_FAIL(mo->opsets, m.count[8]);
    mo->n_opsets = m.count[8];
    KP_CHECK(model_fields(&m, mo));
    KP_CHECK(kp__ox_pb_str_default(&mo->producer));
    if (mo->n_opsets == 0 && mo->ir_version >= 3)
        return kp__error(KP_ERR_PARSE,
                         "not an ONNX model: IR version %lld and no opset_import (field 8)",
                         (long long)mo->ir_version);
    return KP_OK;
}
