/* libFuzzer harness for the ONNX reader (src/onnx/reader/): every input is
 * read as a model, as a single tensor and as an algorithm cache's text
 * (src/onnx/algo_cache.c), from memory (external data is
 * refused there, so nothing outside the input is touched). A refusal must
 * come with a detail and leave the result untouched; an accepted model must
 * be whole, every string set and every tensor's bytes matching its shape.
 *   build-clang/tests/fuzz_onnx CORPUS_DIR tests/fuzz/seeds/onnx */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/onnx/onnx-impl.h"

static void quiet(kp_log_level level, const char *msg, void *user) {}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    return 0;
}

static void fail(const char *why) {
    fprintf(stderr, "fuzz_onnx: %s (%s)\n", why, kp_last_error());
    abort();
}

static void check_tensor(const kp__ox_tensor *t) {
    if (!t->name || t->ndim < 0 || t->ndim > KP_MAX_DIMS || t->numel < 0)
        fail("a tensor without a name or with a bad rank");
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    if (n != t->numel) fail("a tensor's numel is not the product of its shape");
    if (t->dtype_ok && t->bytes != (size_t)t->numel * kp_dtype_size(t->dtype))
        fail("a tensor's bytes do not match its shape");
    if (t->bytes && !t->data) fail("a tensor's bytes without data");
}

static void check_model(const kp__ox_model *m) {
    if (!m->producer || !m->graph_name) fail("a model without its strings");
    for (size_t i = 0; i < m->n_nodes; i++) {
        const kp__ox_node *n = &m->nodes[i];
        if (!n->name || !n->op_type || !n->domain) fail("a node without its strings");
        for (size_t j = 0; j < n->n_inputs; j++)
            if (!n->inputs[j]) fail("a node input without a name");
        for (size_t j = 0; j < n->n_outputs; j++)
            if (!n->outputs[j]) fail("a node output without a name");
        for (size_t j = 0; j < n->n_attrs; j++) {
            const kp__ox_attr *a = &n->attrs[j];
            if (!a->name) fail("an attribute without a name");
            if (a->type == KP__OX_ATTR_TENSOR && a->t) check_tensor(a->t);
            if (a->type == KP__OX_ATTR_INTS && a->n && !a->ints) fail("ints without values");
            if (a->type == KP__OX_ATTR_FLOATS && a->n && !a->floats) fail("floats without values");
            if (a->type == KP__OX_ATTR_STRINGS)
                for (size_t k = 0; k < a->n; k++)
                    if (!a->strings[k]) fail("a missing string");
        }
    }
    for (size_t i = 0; i < m->n_inits; i++) check_tensor(&m->inits[i]);
    for (size_t i = 0; i < m->n_inputs; i++)
        if (!m->inputs[i].name || m->inputs[i].ndim > KP_MAX_DIMS) fail("a bad graph input");
    (void)kp__ox_model_opset(m, "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kp__ox_model *m = (kp__ox_model *)&quiet;
    kp_clear_error();
    kp_status st = kp__ox_read_buffer(data, size, NULL, &m);
    if (st != KP_OK) {
        if (kp_last_error()[0] == '\0') fail("a model refused without a detail");
        if (m != (kp__ox_model *)&quiet) fail("a refused model changed the result");
    } else {
        check_model(m);
        kp__ox_model_free(m);
    }
    kp__ox_tensor t = {.numel = -7};
    kp_clear_error();
    st = kp__ox_read_tensor(data, size, &t);
    if (st != KP_OK) {
        if (kp_last_error()[0] == '\0') fail("a tensor refused without a detail");
        if (t.numel != -7 || t.name || t.data) fail("a refused tensor changed the result");
    } else {
        check_tensor(&t);
        kp__ox_tensor_clear(&t);
    }
    /* the algorithm cache's text, for model 0 on device "X" */
    kp__ox_algo_cache *c = NULL;
    if (kp__ox_algo_cache_create(NULL, 0, "X", &c) != KP_OK) fail("an in-memory cache refused");
    kp_clear_error();
    st = kp__ox_algo_cache_parse(c, (const char *)data, size);
    if (st != KP_OK && kp_last_error()[0] == '\0') fail("a cache text refused without a detail");
    kp__ox_algo a;
    if (st != KP_OK && kp__ox_algo_cache_get(c, "k", &a)) fail("a refused cache text kept a line");
    kp__ox_algo_cache_free(c);
    return 0;
}
