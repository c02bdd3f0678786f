/* NumPy .npy files. A file is the magic "\x93NUMPY", the format version
 * (major, minor), the header length (2 bytes little-endian in 1.0, 4 in 2.0
 * and 3.0), the header -- a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (16384,), }
 * padded with spaces and ended by '\n' -- then the data, exactly as many
 * bytes as dtype and shape say. Every size is checked, with checked
 * arithmetic, against what the file holds before anything is allocated. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core-impl.h"
#include "kpipe/npy.h"

static const struct {
    char code[3];
    kp_dtype dt;
} kp__npy_types[] = {
    {"f4", KP_F32}, {"f2", KP_F16}, {"i4", KP_I32}, {"i2", KP_I16},
    {"i1", KP_I8},  {"u1", KP_U8},  {"i8", KP_I64}, {"u8", KP_U64}, {"u2", KP_U16},
};
#define KP__NPY_NTYPES (sizeof kp__npy_types / sizeof kp__npy_types[0])

/* A cursor over the header text, so that messages say where reading stopped. */
typedef struct kp__npy_cur {
    const char *where; /* the file's name, or "buffer" */
    const char *text, *p, *end;
    size_t base; /* offset of the text in the file */
} kp__npy_cur;

static kp_status kp__npy_fail(const kp__npy_cur *c, const char *fmt, ...) KP__PRINTF(2, 3);
static kp_status kp__npy_fail(const kp__npy_cur *c, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kp__error(KP_ERR_PARSE, "%s: not a valid .npy file: header byte %zu: %s", c->where,
                     c->base + (size_t)(c->p - c->text), what);
}

static void kp__npy_space(kp__npy_cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool kp__npy_eat(kp__npy_cur *c, char ch) {
    kp__npy_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes. */
static kp_status kp__npy_string(kp__npy_cur *c, char *out, size_t cap) {
    kp__npy_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return kp__npy_fail(c, "expected a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    for (; c->p < c->end && *c->p != quote; c->p++) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20)
            return kp__npy_fail(c, "escape or control character in a string");
        if (n + 1 >= cap) return kp__npy_fail(c, "string longer than %zu characters", cap - 1);
        out[n++] = *c->p;
    }
    if (c->p >= c->end) return kp__npy_fail(c, "unterminated string");
    c->p++;
    out[n] = '\0';
    return KP_OK;
}

/* True or False. */
static kp_status kp__npy_bool(kp__npy_cur *c, bool *out) {
    kp__npy_space(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = true;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = false;
    } else {
        return kp__npy_fail(c, "expected True or False");
    }
    return KP_OK;
}

/* A tuple of non-negative integers: (), (5,), (2, 3). */
static kp_status kp__npy_shape(kp__npy_cur *c, kp_tensor_desc *d) {
    if (!kp__npy_eat(c, '(')) return kp__npy_fail(c, "expected '(' opening the shape");
    d->ndim = 0;
    bool comma = false;
    while (!kp__npy_eat(c, ')')) {
        if (d->ndim > 0 && !comma) return kp__npy_fail(c, "expected ',' or ')' in the shape");
        if (d->ndim == KP_MAX_DIMS) return kp__npy_fail(c, "more than %d dimensions", KP_MAX_DIMS);
        kp__npy_space(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return kp__npy_fail(c, "expected a non-negative integer in the shape");
        int64_t v = 0;
        for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++)
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c->p - '0', &v))
                return kp__npy_fail(c, "dimension does not fit in 64 bits");
        d->shape[d->ndim++] = v;
        comma = kp__npy_eat(c, ',');
    }
    if (d->ndim == 1 && !comma)
        return kp__npy_fail(c, "a one-dimensional shape is written (n,), with the comma");
    return KP_OK;
}

/* '<f4', '|u1', ...: little-endian (or one-byte) types kpipe has. */
static kp_status kp__npy_descr(kp__npy_cur *c, const char *descr, kp_dtype *dt) {
    size_t n = strlen(descr);
    for (size_t i = 0; n == 3 && i < KP__NPY_NTYPES; i++) {
        if (strcmp(descr + 1, kp__npy_types[i].code) != 0) continue;
        bool one_byte = kp_dtype_size(kp__npy_types[i].dt) == 1;
        if (descr[0] == '>' && !one_byte)
            return kp__npy_fail(c, "big-endian data ('%s') is not supported; save it as '<%s'",
                                descr, descr + 1);
        if (descr[0] == '<' || descr[0] == '=' ||
            (one_byte && (descr[0] == '|' || descr[0] == '>'))) {
            *dt = kp__npy_types[i].dt;
            return KP_OK;
        }
        break;
    }
    return kp__npy_fail(c,
                        "dtype '%s' is not supported (little-endian f4 f2 i4 i2 i8 u8, or "
                        "i1 u1)",
                        descr);
}

/* One "key: value" entry; `seen` holds a bit per key. */
static kp_status kp__npy_entry(kp__npy_cur *c, kp_tensor_desc *d, bool *fortran, unsigned *seen) {
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    char key[32], descr[32];
    const char *at = c->p;
    KP_CHECK(kp__npy_string(c, key, sizeof key));
    unsigned k = 0;
    while (k < 3 && strcmp(key, keys[k]) != 0) k++;
    if (k == 3) {
        c->p = at;
        return kp__npy_fail(c, "unknown key '%s' (a header has descr, fortran_order, shape)", key);
    }
    if (*seen & (1u << k)) {
        c->p = at;
        return kp__npy_fail(c, "key '%s' appears twice", key);
    }
    *seen |= 1u << k;
    if (!kp__npy_eat(c, ':')) return kp__npy_fail(c, "expected ':' after '%s'", key);
    if (k == 1) return kp__npy_bool(c, fortran);
    if (k == 2) return kp__npy_shape(c, d);
    at = c->p;
    KP_CHECK(kp__npy_string(c, descr, sizeof descr));
    const char *after = c->p;
    c->p = at;
    KP_CHECK(kp__npy_descr(c, descr, &d->dtype));
    c->p = after;
    return KP_OK;
}

/* The dict, then nothing but padding. */
static kp_status kp__npy_dict(kp__npy_cur *c, kp_tensor_desc *d) {
    bool fortran = false;
    unsigned seen = 0;
    if (!kp__npy_eat(c, '{')) return kp__npy_fail(c, "expected '{' opening the header");
    while (!kp__npy_eat(c, '}')) {
        KP_CHECK(kp__npy_entry(c, d, &fortran, &seen));
        if (kp__npy_eat(c, ',')) continue;
        if (!kp__npy_eat(c, '}')) return kp__npy_fail(c, "expected ',' or '}'");
        break;
    }
    kp__npy_space(c);
    if (c->p != c->end) return kp__npy_fail(c, "text after the closing '}'");
    if (seen != 7)
        return kp__npy_fail(c, "missing key '%s'",
                            !(seen & 1)   ? "descr"
                            : !(seen & 2) ? "fortran_order"
                                          : "shape");
    int big = 0;
    for (int k = 0; k < d->ndim; k++) big += d->shape[k] > 1;
    if (fortran && big > 1)
        return kp__npy_fail(c, "Fortran-ordered data is not supported; save it in C order");
    return KP_OK;
}

/* Version and header length; *hdr_off is where the header text starts. */
static kp_status kp__npy_prelude(const char *where, const unsigned char *b, size_t avail,
                                 size_t *hdr_off, size_t *hlen) {
    if (avail < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return kp__error(KP_ERR_PARSE, "%s: not a .npy file (no \\x93NUMPY magic)", where);
    if (b[6] < 1 || b[6] > 3 || b[7] != 0)
        return kp__error(KP_ERR_PARSE,
                         "%s: .npy format version %d.%d is not supported (1.0 to "
                         "3.0)",
                         where, b[6], b[7]);
    *hlen = b[8] | (size_t)b[9] << 8;
    *hdr_off = 10;
    if (b[6] >= 2) {
        if (avail < 12)
            return kp__error(KP_ERR_PARSE, "%s: .npy file cut short in its prelude", where);
        *hlen |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
        *hdr_off = 12;
    }
    return KP_OK;
}

/* Parses header text and checks that the file (file_size bytes) holds
 * exactly the data it describes. */
static kp_status kp__npy_header(const char *where, const char *text, size_t hlen, size_t hdr_off,
                                uint64_t file_size, kp_tensor_desc *d) {
    kp__npy_cur c = {.where = where, .text = text, .p = text, .end = text + hlen, .base = hdr_off};
    memset(d, 0, sizeof *d);
    if (memchr(text, '\0', hlen)) return kp__npy_fail(&c, "a NUL byte in the header");
    KP_CHECK(kp__npy_dict(&c, d));
    int64_t numel = 1, run = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        d->strides[k] = run;
        if (__builtin_mul_overflow(numel, d->shape[k], &numel) ||
            (d->shape[k] > 1 && __builtin_mul_overflow(run, d->shape[k], &run)))
            return kp__error(KP_ERR_PARSE, "%s: the shape's element count overflows", where);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)kp_dtype_size(d->dtype), &bytes) ||
        kp_desc_validate(d) != KP_OK)
        return kp__error(KP_ERR_PARSE, "%s: the shape's byte size overflows", where);
    uint64_t off = hdr_off + hlen;
    if (file_size < off || file_size - off != bytes) {
        char shape[128];
        return kp__error(KP_ERR_PARSE,
                         "%s: the header says %s (%llu data bytes), the file holds "
                         "%llu data bytes",
                         where, kp_desc_str(d, shape, sizeof shape), (unsigned long long)bytes,
                         (unsigned long long)(file_size > off ? file_size - off : 0));
    }
    return KP_OK;
}

kp_status kp_npy_parse(const void *buf, size_t len, kp_tensor_desc *desc, size_t *data_offset) {
    KP_API_ENTRY();
    if (!buf || !desc || !data_offset)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_npy_parse: buf, desc and data_offset are required");
    size_t hdr_off = 0, hlen = 0;
    KP_CHECK(kp__npy_prelude("buffer", buf, len, &hdr_off, &hlen));
    if (hlen > len - hdr_off)
        return kp__error(KP_ERR_PARSE, "buffer: the .npy header claims %zu bytes, %zu follow", hlen,
                         len - hdr_off);
    KP_CHECK(kp__npy_header("buffer", (const char *)buf + hdr_off, hlen, hdr_off, len, desc));
    *data_offset = hdr_off + hlen;
    return KP_OK;
}

/* Reads exactly `n` bytes or says why not. */
static kp_status kp__npy_read(FILE *f, const char *path, void *dst, size_t n, const char *what) {
    if (n && fread(dst, 1, n, f) != n)
        return kp__error(KP_ERR_IO, "%s: cannot read the %s: %s", path, what,
                         ferror(f) ? strerror(errno) : "the file is shorter than it was");
    return KP_OK;
}

static kp_status kp__npy_load(FILE *f, const char *path, uint64_t size, kp_tensor_desc *desc,
                              void **data, size_t *bytes) {
    unsigned char pre[12];
    size_t avail = size < sizeof pre ? (size_t)size : sizeof pre, hdr_off = 0, hlen = 0;
    KP_CHECK(kp__npy_read(f, path, pre, avail, "prelude"));
    KP_CHECK(kp__npy_prelude(path, pre, avail, &hdr_off, &hlen));
    if (hlen > size - hdr_off)
        return kp__error(KP_ERR_PARSE,
                         "%s: the .npy header claims %zu bytes, the file has %llu "
                         "after the prelude",
                         path, hlen, (unsigned long long)(size - hdr_off));
    if (fseek(f, (long)hdr_off, SEEK_SET) != 0)
        return kp__error(KP_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
    char *text = kp__malloc(hlen + 1);
    if (!text)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a %zu-byte header", path, hlen);
    kp_status st = kp__npy_read(f, path, text, hlen, "header");
    if (st == KP_OK) st = kp__npy_header(path, text, hlen, hdr_off, size, desc);
    kp__free(text);
    if (st != KP_OK) return st;
    *bytes = (size_t)(size - hdr_off - hlen); /* checked equal to what the header says */
    *data = kp__aligned_alloc(KP_MEM_HOST, *bytes ? *bytes : 1, 64);
    if (!*data)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for %zu data bytes", path, *bytes);
    return kp__npy_read(f, path, *data, *bytes, "data");
}

kp_status kp_npy_load(const char *path, kp_tensor_desc *desc, void **data, size_t *bytes) {
    KP_API_ENTRY();
    if (!path || !desc || !data || !bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_npy_load: path, desc, data and bytes are required");
    *data = NULL;
    *bytes = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kp__error(KP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    kp_status st = KP_OK;
    if (fstat(fileno(f), &sb) != 0)
        st = kp__error(KP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = kp__error(KP_ERR_IO, "%s: not a regular file", path);
    if (st == KP_OK) st = kp__npy_load(f, path, (uint64_t)sb.st_size, desc, data, bytes);
    fclose(f);
    if (st != KP_OK) {
        kp_npy_free(*data);
        *data = NULL;
        *bytes = 0;
    }
    return st;
}

void kp_npy_free(void *data) { kp__aligned_free(KP_MEM_HOST, data); }

/* The header text, padded so that the data starts 64-byte aligned. */
static size_t kp__npy_format_header(const kp_tensor_desc *d, const char *code, char *hdr,
                                    size_t cap) {
    int len = snprintf(hdr, cap, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                       kp_dtype_size(d->dtype) == 1 ? '|' : '<', code);
    for (int k = 0; k < d->ndim; k++)
        len += snprintf(hdr + len, cap - (size_t)len, "%lld,%s", (long long)d->shape[k],
                        k + 1 < d->ndim ? " " : "");
    len += snprintf(hdr + len, cap - (size_t)len, "), }");
    size_t total = (10 + (size_t)len + 1 + 63) / 64 * 64;
    while (10 + (size_t)len + 1 < total) hdr[len++] = ' ';
    hdr[len++] = '\n';
    return (size_t)len;
}

kp_status kp_npy_save(const char *path, const kp_tensor_desc *desc, const void *data) {
    KP_API_ENTRY();
    if (!path || !desc || !data)
        return kp__error(KP_ERR_INVALID_ARG, "kp_npy_save: path, desc and data are required");
    KP_CHECK(kp_desc_validate(desc));
    if (!kp_desc_is_contiguous(desc))
        return kp__error(KP_ERR_INVALID_ARG, "kp_npy_save: %s: the tensor is not contiguous", path);
    const char *code = NULL;
    for (size_t i = 0; i < KP__NPY_NTYPES; i++)
        if (kp__npy_types[i].dt == desc->dtype) code = kp__npy_types[i].code;
    if (!code)
        return kp__error(KP_ERR_UNSUPPORTED, "kp_npy_save: %s: dtype %s has no .npy equivalent",
                         path, kp_dtype_name(desc->dtype));
    char hdr[512];
    size_t len = kp__npy_format_header(desc, code, hdr, sizeof hdr);
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(len & 0xff),
                             (unsigned char)(len >> 8)};
    size_t bytes = (size_t)kp_desc_numel(desc) * kp_dtype_size(desc->dtype);
    FILE *f = fopen(path, "wb");
    if (!f)
        return kp__error(KP_ERR_IO, "kp_npy_save: %s: cannot create: %s", path, strerror(errno));
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, len, f) == len &&
              fwrite(data, 1, bytes, f) == bytes;
    int err = errno;
    ok = (fclose(f) == 0) && ok;
    return ok ? KP_OK
              : kp__error(KP_ERR_IO, "kp_npy_save: %s: write failed: %s", path, strerror(err));
}
