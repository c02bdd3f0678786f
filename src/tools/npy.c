/* NumPy .npy files: the header is a Python dict literal, e.g.
 * {'descr': '<f4', 'fortran_order': False, 'shape': (16384,), }
 * padded so the data starts on a 64-byte boundary. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tool-impl.h"

static const struct { const char *descr; kp_dtype dt; } kpt_descrs[] = {
    {"<f4", KP_F32}, {"<f2", KP_F16}, {"<i4", KP_I32}, {"<i2", KP_I16}, {"|i1", KP_I8},
    {"|u1", KP_U8}, {"<i8", KP_I64}, {"<u8", KP_U64},
};

static kp_status kpt_npy_err(const char *path, const char *why) {
    fprintf(stderr, "%s: not a readable .npy file: %s\n", path, why);
    return KP_ERR_PARSE;
}

/* Value text after 'key': in the header dict. */
static const char *kpt_dict_value(const char *hdr, const char *key) {
    const char *k = strstr(hdr, key);
    if (!k) return NULL;
    k = strchr(k + strlen(key), ':');
    if (!k) return NULL;
    for (k++; *k == ' '; k++) {}
    return k;
}

static kp_status kpt_npy_header(const char *path, const char *hdr, kpt_npy *a) {
    const char *d = kpt_dict_value(hdr, "'descr'"), *f = kpt_dict_value(hdr, "'fortran_order'"),
               *s = kpt_dict_value(hdr, "'shape'");
    if (!d || !f || !s || *d != '\'' || *s != '(') return kpt_npy_err(path, "malformed header");
    size_t i, nd = sizeof kpt_descrs / sizeof kpt_descrs[0];
    for (i = 0; i < nd; i++)
        if (strncmp(d + 1, kpt_descrs[i].descr, 3) == 0 && d[4] == '\'') break;
    if (i == nd) return kpt_npy_err(path, "unsupported dtype (little-endian f4 f2 i4 i2 i1 u1 i8 u8)");
    a->dtype = kpt_descrs[i].dt;
    if (strncmp(f, "False", 5) != 0) return kpt_npy_err(path, "Fortran order is not supported");
    a->ndim = 0;
    for (const char *p = s + 1; *p && *p != ')';) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || a->ndim == KP_MAX_DIMS)
            return kpt_npy_err(path, "bad shape");
        a->shape[a->ndim++] = v;
        p = end;
    }
    return KP_OK;
}

kp_status kpt_npy_read(const char *path, kpt_npy *a) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        return KP_ERR_IO;
    }
    unsigned char pre[12];
    kp_status st = KP_OK;
    char *hdr = NULL;
    size_t hlen = 0;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = kpt_npy_err(path, "no NumPy magic");
        goto out;
    }
    hlen = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] >= 2) {
        if (fread(pre + 10, 1, 2, f) != 2) { st = kpt_npy_err(path, "truncated"); goto out; }
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    hdr = calloc(1, hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) { st = kpt_npy_err(path, "truncated header"); goto out; }
    if ((st = kpt_npy_header(path, hdr, a)) != KP_OK) goto out;
    size_t n = 1;
    for (int k = 0; k < a->ndim; k++) n *= (size_t)a->shape[k];
    a->bytes = n * kp_dtype_size(a->dtype);
    a->data = malloc(a->bytes ? a->bytes : 1);
    if (!a->data || fread(a->data, 1, a->bytes, f) != a->bytes) st = kpt_npy_err(path, "truncated data");
out:
    free(hdr);
    fclose(f);
    if (st != KP_OK) kpt_npy_free(a);
    return st;
}

kp_status kpt_npy_write(const char *path, const kp_tensor_desc *desc, const void *data) {
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof kpt_descrs / sizeof kpt_descrs[0]; i++)
        if (kpt_descrs[i].dt == desc->dtype) descr = kpt_descrs[i].descr;
    if (!descr) {
        fprintf(stderr, "%s: dtype %s has no .npy equivalent\n", path, kp_dtype_name(desc->dtype));
        return KP_ERR_UNSUPPORTED;
    }
    char hdr[512];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int k = 0; k < desc->ndim; k++)
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%lld,%s", (long long)desc->shape[k],
                        k + 1 < desc->ndim ? " " : "");
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "), }");
    int total = (10 + len + 1 + 63) / 64 * 64; /* magic+version+len, header, '\n' */
    while (10 + len + 1 < total) hdr[len++] = ' ';
    hdr[len++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff),
                             (unsigned char)(len >> 8)};
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot create: %s\n", path, strerror(errno));
        return KP_ERR_IO;
    }
    size_t bytes = (size_t)kp_desc_numel(desc) * kp_dtype_size(desc->dtype);
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len &&
              fwrite(data, 1, bytes, f) == bytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "%s: write failed: %s\n", path, strerror(errno));
    return ok ? KP_OK : KP_ERR_IO;
}

void kpt_npy_free(kpt_npy *a) {
    free(a->data);
    a->data = NULL;
}
