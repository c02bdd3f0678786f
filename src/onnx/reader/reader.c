/* ONNX model files: the graph's structure (ModelProto, GraphProto,
 * NodeProto, AttributeProto), decoded with reader_msg.c's cursor; files
 * and external data; the entry points; and freeing.
 *
 * Subgraphs (attributes of type GRAPH and GRAPHS) are skipped unread, so
 * decoding never recurses: the deepest path is Model > Graph > Node >
 * Attribute > Tensor > external_data entry, and the nesting depth is fixed
 * by the code rather than by the file.
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

static void *zalloc(size_t n, size_t size) { return n ? kp__calloc(n, size) : NULL; }

#define ARRAY_OR_FAIL(p, n)                                      \
    do {                                                         \
        (p) = zalloc((n), sizeof *(p));                          \
        if ((n) && !(p)) return kp__ox_pb_oom((n), sizeof *(p)); \
    } while (0)

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

/* A tensor's external data, read from the model's folder (NULL: a model
 * read from memory, which has none). */
static kp_status ext_load(const char *dir, kp__ox_tensor *t, const kp__ox_ext *e) {
    if (!dir)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "tensor '%.200s': its data is in file '%.200s', and a model read from "
                         "memory has no folder to find it in",
                         t->name, e->location);
    size_t bytes = (size_t)t->numel * kp_dtype_size(t->dtype);
    KP_CHECK(ext_read(dir, t->name, e->location, e->offset, e->length, bytes, &t->data));
    t->bytes = bytes;
    uint8_t *b = t->data;
    if (t->onnx_type == KP__OX_BOOL)
        for (size_t i = 0; i < bytes; i++) b[i] = b[i] != 0;
    return KP_OK;
}

/* A TensorProto inside up, with its external data read. */
static kp_status tensor(const msg *up, const fld *f, long index, kp__ox_tensor *t) {
    kp__ox_ext ext = {0};
    kp_status st = kp__ox_decode_tensor(up, f, index, t, &ext);
    if (st == KP_OK && ext.location) st = ext_load(up ? up->dir : NULL, t, &ext);
    kp__free(ext.location);
    return st;
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
        return tensor(m, f, -1, a->t);
    case 7: return kp__ox_pb_floats(m, f, a->floats, m->count[7], &k[0]);
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
        case 5: KP_CHECK(tensor(&m, &f, i, &mo->inits[i])); break;
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

static kp_status decode_model(const uint8_t *buf, size_t len, const char *dir, kp__ox_model *mo) {
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
/* --- entry points --------------------------------------------------------------- */

/* A digest of the file's bytes: four 64-bit lanes, multiply and fold,
 * several GB/s, so a 100 MB model costs milliseconds. It names the model
 * in the algorithm cache's file (algo_cache.c); it is not a checksum
 * anyone should trust against a forger. */
static uint64_t digest(const unsigned char *p, size_t len) {
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h[4] = {len ^ k, len + k, ~len, len * k};
    size_t i = 0;
    for (; i + 32 <= len; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * 0xff51afd7ed558ccdull;
            h[l] ^= h[l] >> 29;
        }
    uint64_t r = 0;
    for (; i < len; i++) r = (r ^ p[i]) * 1099511628211ull;
    for (int l = 0; l < 4; l++) r = (r ^ h[l]) * 0xc4ceb9fe1a85ec53ull, r ^= r >> 31;
    return r;
}

kp_status kp__ox_read_buffer(const void *buf, size_t len, const char *dir, kp__ox_model **out) {
    if (!out || (!buf && len))
        return kp__error(KP_ERR_INVALID_ARG, "kp__ox_read_buffer: NULL buffer or result");
    if (len > KP__OX_MAX_FILE)
        return kp__error(KP_ERR_PARSE, "not an ONNX model file: %zu bytes is over protobuf's 2 GiB",
                         len);
    kp__ox_model *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "reading an ONNX model: no memory");
    kp_status st = decode_model(buf, len, dir, m);
    if (st != KP_OK) {
        kp__ox_model_free(m);
        return st;
    }
    m->digest = digest(buf, len);
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
    kp_status st = tensor(NULL, &whole, -1, &t);
    if (st != KP_OK) {
        kp__ox_tensor_clear(&t);
        return st;
    }
    *out = t;
    return KP_OK;
}
