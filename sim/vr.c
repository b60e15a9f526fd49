/* vr.c: small shared helpers for every vrsim module (vr.h). */
#include "vr.h"

/* A short English name for a status, for messages. Never NULL. */
const char *vr_status_str(VrStatus s)
{
    switch (s) {
    case VR_OK:
        return "ok";
    case VR_EINVAL:
        return "invalid input";
    case VR_ENOMEM:
        return "out of host memory";
    case VR_EIO:
        return "input/output error";
    case VR_OOM:
        return "simulated device out of memory";
    case VR_ENOTSUP:
        return "not supported by the simulator yet";
    }
    return "unknown status";
}
