/* device.c: the roofline cost of one op on a DeviceSpec. */
#include "device.h"

#include <string.h>

double device_op_ns(const DeviceSpec *dev, const Op *op) {
    if (op->kind && strcmp(op->kind, "none") == 0) return 0.0;
    double rate = dev->peak_flops[op->compute_dtype];
    if (rate <= 0) rate = dev->peak_flops[DT_FP32];
    double ec = dev->eff_compute > 0 ? dev->eff_compute : 1.0;
    double em = dev->eff_memory > 0 ? dev->eff_memory : 1.0;
    double t_c = rate > 0 ? op->flops / (rate * ec) : 0.0;
    double t_m = dev->mem_bw > 0 ? op->bytes_moved / (dev->mem_bw * em) : 0.0;
    double t = t_c > t_m ? t_c : t_m;
    return t * 1e9 + dev->launch_ns;
}
