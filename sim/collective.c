/* collective.c: NCCL collective costs (see collective.h). */
#include "collective.h"

#include <math.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>

VrStatus coll_kind_parse(const char *s, CollKind *out) {
    static const struct { const char *name; CollKind k; } names[] = {
        {"allreduce", COLL_ALLREDUCE}, {"all_reduce", COLL_ALLREDUCE},
        {"reduce_scatter", COLL_REDUCE_SCATTER}, {"reducescatter", COLL_REDUCE_SCATTER},
        {"allgather", COLL_ALLGATHER}, {"all_gather", COLL_ALLGATHER},
        {"broadcast", COLL_BROADCAST}, {"all_to_all", COLL_ALLTOALL}, {"alltoall", COLL_ALLTOALL},
        {"send", COLL_SEND}, {"recv", COLL_RECV}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) { *out = names[i].k; return VR_OK; }
    return VR_EINVAL;
}

double coll_bus_bytes(CollKind k, double bytes, int n) {
    if (n <= 1) return 0;
    double f = (double)(n - 1) / n;
    switch (k) {
    case COLL_ALLREDUCE: return 2 * f * bytes;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:
    case COLL_ALLTOALL: return f * bytes;
    default: return bytes;
    }
}

VrStatus coll_fit(const CollPoint *pts, int n, CollLink *out) {
    double x[64], y[64];
    int m = 0;
    for (int i = 0; i < n && m < 64; i++) {
        if (!(pts[i].bytes > 0) || !(pts[i].ns > 0) || pts[i].ranks < 2) continue;
        x[m] = pts[i].bytes; /* bus bytes, already converted by the caller */
        y[m] = pts[i].ns;
        m++;
    }
    if (m < 2) return VR_EINVAL;
    double c0, c1, cov00, cov01, cov11, sumsq;
    if (gsl_fit_linear(x, 1, y, 1, (size_t)m, &c0, &c1, &cov00, &cov01, &cov11, &sumsq) != GSL_SUCCESS)
        return VR_EINVAL;
    if (!(c1 > 0)) return VR_EINVAL;
    out->latency_ns = c0 > 0 ? c0 : 0;
    out->bus_bw = 1e9 / c1;
    return VR_OK;
}

/* Latency steps of the ring (or, for all-to-all and point-to-point, the one grouped step). */
static double ring_steps(CollKind k, int n) {
    if (k == COLL_ALLREDUCE) return 2.0 * (n - 1);
    if (k == COLL_ALLTOALL || k == COLL_SEND || k == COLL_RECV) return 1.0;
    return (double)(n - 1);
}

double coll_time_ns(const CollLink *link, CollKind k, double bytes, int n) {
    if (n <= 1 || !(link->bus_bw > 0)) return 0;
    double data = coll_bus_bytes(k, bytes, n) / link->bus_bw * 1e9;
    double steps = ring_steps(k, n);
    double ring = steps * link->latency_ns + data;
    if (k != COLL_ALLREDUCE) return ring;
    double tree = 2.0 * ceil(log2((double)n)) * link->latency_ns + data;
    return tree < ring ? tree : ring;
}

double coll_net_bus_bw(const CollNet *net) {
    double share = net->gpus_per_node > 0 ? (double)net->per_node / net->gpus_per_node : 1.0;
    double bw = share * net->nics_per_node * net->nic_bw;
    return net->intra.bus_bw > 0 && net->intra.bus_bw < bw ? net->intra.bus_bw : bw;
}

double coll_net_time_ns(const CollNet *net, CollKind k, double bytes, int n) {
    double bw = coll_net_bus_bw(net);
    if (n <= 1 || !(bw > 0)) return 0;
    double data = coll_bus_bytes(k, bytes, n) / bw * 1e9;
    double lat = net->nic_latency_ns > net->intra.latency_ns ? net->nic_latency_ns : net->intra.latency_ns;
    double steps = ring_steps(k, n);
    double ring = steps * lat + data;
    if (k != COLL_ALLREDUCE) return ring;
    double tree = 2.0 * (ceil(log2((double)net->nodes)) * net->nic_latency_ns +
                         (net->per_node - 1) * net->intra.latency_ns) + data;
    return tree < ring ? tree : ring;
}
