/* The JSON form of flows (src/flow/json/, the highest of the flow layers:
 * runtime < stages < remote < json): the reader of a flow's document
 * (flow_json.c) and its sources and sinks, chosen by kind from a table
 * (flow_json_ends.c); what the two share is here. It makes stages through
 * the private headers the layers below offer the ones above
 * (stages-impl.h, remote_end-impl.h, tests/layering.py's UPWARD list) and
 * reads JSON with the helpers every reader shares (core/json-impl.h). */
#ifndef KPIPE_FLOW_JSON_IMPL_H
#define KPIPE_FLOW_JSON_IMPL_H

#include "../../core/json-impl.h"
#include "../remote/remote_end-impl.h"
#include "../stages/stages-impl.h"

#define KP__DEFAULT_CAPACITY 4

typedef struct kp__flow_build {
    kp_device_t dev;
    const char *base_dir; /* of the flow file; "" for text */
    kp_flow_stage st[KP_FLOW_MAX_STAGES];
    char names[KP_FLOW_MAX_STAGES][64];
    const char *from[KP_FLOW_MAX_STAGES][KP_FLOW_MAX_STAGES]; /* into the document */
    bool sink[KP_FLOW_MAX_STAGES];
    size_t n_rep[KP_FLOW_MAX_STAGES];
    size_t streams_in[KP_FLOW_MAX_STAGES]; /* the source streams that reach each stage */
    kp__stage_made made[KP_FLOW_MAX_STAGES][KP_FLOW_MAX_REPLICAS]; /* one per replica */
    void *users[KP_FLOW_MAX_STAGES][KP_FLOW_MAX_REPLICAS];
    kp_device_t rep_devs[KP_FLOW_MAX_STAGES][KP_FLOW_MAX_REPLICAS];
    kp_device_t opened[KP_FLOW_MAX_DEVICES]; /* devices the file names, opened here */
    size_t n_opened;
    size_t n;
    size_t frame_bytes, budget, trace;
    bool strict; /* strict_no_host_copies: sources refuse what would copy from the host */
    /* the caller's own stages ("callback": NAME; kp_flow_create_from_json_with) */
    const kp_flow_stage *callbacks;
    size_t n_callbacks;
    bool callback[KP_FLOW_MAX_STAGES];
    bool used[KP_FLOW_MAX_STAGES]; /* per callback: a stage took it */
    char y4m_tags[256]; /* a y4m source's header tags, for a y4m sink */
} kp__flow_build;

/* Refuses the keys only some kinds of stage take (those of the sources
 * and sinks in flow_json_ends.c's tables: "frames", "path", ...) unless
 * `allowed` (NULL-ended) names them; `kind` names the stage's kind. */
kp_status kp__json_kind_keys(json_t *s, const char *path, const char *kind,
                             const char *const *allowed);
/* A source stage and a sink stage, of the kind their "source" or "sink"
 * names, made into *m; errors named by `path`. */
kp_status kp__json_source(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                          kp__stage_made *m);
kp_status kp__json_sink(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                        kp__stage_made *m);

#endif
