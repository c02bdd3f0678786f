/* ONNX model files: reading them, their external data, and freeing what the
 * decoders (reader_msg.c) build.
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

#include "onnx-impl.h"

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

kp_status kp__ox_external_read(const char *dir, const char *tensor, const char *location,
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
    if (offset > size || (length != UINT64_MAX && length > size - offset))
        s = kp__error(KP_ERR_PARSE,
                      "tensor '%.200s': external data file '%.200s' holds %llu bytes, shorter than "
                      "offset %llu + length %llu",
                      tensor, location, (unsigned long long)size, (unsigned long long)offset,
                      (unsigned long long)(length == UINT64_MAX ? 0 : length));
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
    kp_status st = kp__ox_decode_tensor(buf, len, &t);
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
