/* A test-only backend: the cpu backend registered again as "cpu4", whose
 * kernel launches are split over four workers. The conformance suite runs
 * on it as on any backend. */
#include "kpipe/kpipe.h"
#include "support/test_kernels.h"

kp_status kpt_backend_cpu4_register(void) {
    static const kp_host_options four = {sizeof(kp_host_options), 4, 4};
    kp_backend_reg reg = *kp_backend_find("cpu");
    reg.name = "cpu4";
    reg.options = &four;
    return kp_backend_register(&reg);
}
