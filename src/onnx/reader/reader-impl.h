/* The ONNX reader's private interface: the protobuf wire-format cursor
 * and the tensor messages (reader_msg.c) that reader.c builds models with.
 *
 *   kp__ox_pb_msg m;
 *   kp__ox_pb_field f;
 *   bool got;
 *   KP__OX_PB_OPEN(&m, up, &field, "NodeProto", node_spec, index);
 *   KP_CHECK(kp__ox_pb_tally(&m));                // checks the level, counts fields
 *   while ((st = kp__ox_pb_next(&m, &f, &got)) == KP_OK && got)
 *       if (f.num == 3) st = kp__ox_pb_str(&m, &f, &name);
 *
 * The reader's two files call one way: reader.c (the graph's structure,
 * files, external data, entry points, freeing) uses reader_msg.c (this
 * cursor, and the messages that describe a tensor), never the reverse.
 * Decoding does no I/O: an external tensor's location comes back to
 * reader.c, which reads the file. */
#ifndef KPIPE_ONNX_READER_IMPL_H
#define KPIPE_ONNX_READER_IMPL_H

#include "../onnx-impl.h"

/* What a known field must look like on the wire. */
enum {
    KP__OX_PB_NONE, /* not a field the decoder knows: any wire type but groups */
    KP__OX_PB_INT,  /* a varint (wire type 0) */
    KP__OX_PB_INTS, /* repeated varints: unpacked (0) or packed (2) */
    KP__OX_PB_F32,  /* 4 bytes (5) */
    KP__OX_PB_F32S, /* repeated 4-byte values: unpacked (5) or packed (2) */
    KP__OX_PB_F64S, /* repeated 8-byte values: unpacked (1) or packed (2) */
    KP__OX_PB_LEN,  /* bytes, a string or a nested message (2) */
    KP__OX_PB_NAME, /* KP__OX_PB_LEN holding the message's name, for messages */
};

typedef struct kp__ox_pb_fspec {
    const char *name;
    unsigned char kind;
} kp__ox_pb_fspec;

/* Fields numbered below this are counted by kp__ox_pb_tally. */
#define KP__OX_PB_NCOUNT 32

/* A message being decoded: its bytes, its place for messages, its counts. */
typedef struct kp__ox_pb_msg {
    const uint8_t *base; /* the whole buffer: offsets in messages are from here */
    const char *dir;     /* external data's folder, or NULL */
    const struct kp__ox_pb_msg *up;
    const char *kind;       /* "TensorProto" */
    const char *name;       /* set once decoded; "" or NULL: unnamed */
    const uint8_t *name_at; /* else its name field as kp__ox_pb_tally saw it */
    size_t name_len;
    long index; /* the entry's place in its repeated field, or -1 */
    const kp__ox_pb_fspec *spec;
    size_t nspec;
    const uint8_t *start, *p, *end;
    bool known;                     /* a known field with its expected wire type was seen */
    bool trunc;                     /* the last failure was a field running past the end */
    size_t count[KP__OX_PB_NCOUNT]; /* elements per field number (kp__ox_pb_tally) */
} kp__ox_pb_msg;

typedef struct kp__ox_pb_field {
    uint32_t num;
    unsigned wt;
    uint64_t v; /* wire types 0, 1 and 5 */
    const uint8_t *data;
    size_t len;
    const uint8_t *at; /* the tag */
} kp__ox_pb_field;

/* Opens a message over len bytes at data, inside `up` (NULL: the buffer). */
void kp__ox_pb_open(kp__ox_pb_msg *m, const kp__ox_pb_msg *up, const uint8_t *data, size_t len,
                    const char *kind, const kp__ox_pb_fspec *spec, size_t nspec, long index);
#define KP__OX_PB_OPEN(m, up, f, kind, spec, index)                                                \
    kp__ox_pb_open((m), (up), (f)->data, (f)->len, (kind), (spec), sizeof(spec) / sizeof(spec)[0], \
                   (index))
/* The next field; *got is false at the end. Checks the tag, the length
 * against the message's end and a known field's wire type. */
kp_status kp__ox_pb_next(kp__ox_pb_msg *m, kp__ox_pb_field *f, bool *got);
/* The first pass over a message's level: every field checked as by
 * kp__ox_pb_next, m->count filled, the name span noted; rewinds. */
kp_status kp__ox_pb_tally(kp__ox_pb_msg *m);
/* KP_ERR_PARSE (or `st`) as "<adj> TensorProto 'w' at byte N: <detail>". */
kp_status kp__ox_pb_bad(const kp__ox_pb_msg *m, kp_status st, const uint8_t *at, const char *adj,
                        const char *fmt, ...) KP__PRINTF(5, 6);
kp_status kp__ox_pb_oom(size_t n, size_t size);
/* A string field as a new NUL-terminated copy in *out (the old one freed);
 * a NUL byte inside is refused. */
kp_status kp__ox_pb_str(kp__ox_pb_msg *m, const kp__ox_pb_field *f, char **out);
/* "" when *s is still NULL. */
kp_status kp__ox_pb_str_default(char **s);
/* Each varint of a KP__OX_PB_INTS field (packed or not) into dst[*k...],
 * at most cap kept; *k counts them all. */
kp_status kp__ox_pb_ints(kp__ox_pb_msg *m, const kp__ox_pb_field *f, int64_t *dst, size_t cap,
                         size_t *k);
/* Each value of a KP__OX_PB_F32S field into dst[*k...], at most cap kept. */
kp_status kp__ox_pb_floats(kp__ox_pb_msg *m, const kp__ox_pb_field *f, float *dst, size_t cap,
                           size_t *k);
/* Calls put(ctx, k, v) for each varint of a KP__OX_PB_INTS field, k
 * counting on from *k. */
kp_status kp__ox_pb_each(kp__ox_pb_msg *m, const kp__ox_pb_field *f, size_t *k,
                         void (*put)(void *ctx, size_t k, uint64_t v), void *ctx);

/* A tensor's external data as its TensorProto places it: location is a
 * kp__malloc'd string, the caller's to free on success and error alike;
 * length is UINT64_MAX when absent (to the end of the file). */
typedef struct kp__ox_ext {
    char *location;
    uint64_t offset, length;
} kp__ox_ext;

/* Decodes a TensorProto: the message at f inside up, or (up NULL) the
 * buffer f->data, f->len. Elements in raw_data or the typed fields are
 * placed in t->data; external ones are left to the caller, described in
 * *ext (location NULL when there are none, or the type is not held). On
 * error *t holds what was decoded, for kp__ox_tensor_clear. */
kp_status kp__ox_decode_tensor(const kp__ox_pb_msg *up, const kp__ox_pb_field *f, long index,
                               kp__ox_tensor *t, kp__ox_ext *ext);
/* Decodes the ValueInfoProto at f inside up: name, element type and shape
 * of a tensor type; other types leave onnx_type 0. */
kp_status kp__ox_decode_value_info(const kp__ox_pb_msg *up, const kp__ox_pb_field *f, long index,
                                   kp__ox_value_info *v);

#endif
