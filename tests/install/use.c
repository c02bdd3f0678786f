/* A program outside the tree, built against an installed kpipe. */
#include <stdio.h>
#include <kpipe/kpipe.h>
int main(void) {
    kp_device_t d;
    if (kp_device_open("cpu", &d) != KP_OK) return 1;
    kp_pipeline_t p;
    kp_status st = kp_pipeline_create_from_json(d, "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"relu\", \"id\": \"r\", \"params\": {\"size\": 4}}], \"inputs\": {\"x\": \"r.input\"}}", &p);
    printf("create: %s\n", kp_status_str(st));
    kp_pipeline_destroy(p);
    kp_device_close(d);
    return st;
}
