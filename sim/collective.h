/* collective.h: NCCL collectives (all-reduce, reduce-scatter, all-gather, broadcast) as
 * latency plus bytes over bus bandwidth, for the ring and tree algorithms NCCL chooses between.
 *
 * Bus bytes follow nccl-tests: all-reduce moves 2 (n-1)/n of the buffer per rank, reduce-scatter
 * and all-gather (n-1)/n, broadcast 1. Ring: (n-1) latency steps (2 (n-1) for all-reduce); tree
 * (all-reduce only): 2 log2(n) steps. The latency and bandwidth per collective come from a
 * least-squares fit (GSL) of measured NCCL points when the GPU has a calibrated link profile,
 * else from the link catalog (lua/hw/links.lua). */
#ifndef VR_COLLECTIVE_H
#define VR_COLLECTIVE_H

#include "vr.h"

typedef enum CollKind { COLL_ALLREDUCE = 0, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST,
                        COLL_COUNT } CollKind;

/* Latency and bus bandwidth of one collective on one link. */
typedef struct CollLink {
    double latency_ns;   /* per ring step */
    double bus_bw;       /* bytes/s */
} CollLink;

/* A measured point: buffer bytes (the larger buffer, as nccl-tests), ranks, time in ns. */
typedef struct CollPoint {
    double bytes;
    int ranks;
    double ns;
} CollPoint;

/* Parses "allreduce", "all_reduce", "reduce_scatter", "allgather", "all_gather", "broadcast". */
VrStatus coll_kind_parse(const char *s, CollKind *out /* OUT */);

/* Bytes each rank moves over the link for a collective of `bytes` over n ranks. */
double coll_bus_bytes(CollKind k, double bytes, int n);

/* Fits latency + bus_bytes / bw to the points (GSL least squares, time against bus bytes).
 * VR_EINVAL with fewer than two usable points or a non-positive fitted bandwidth. */
VrStatus coll_fit(const CollPoint *pts, int n, CollLink *out /* OUT */);

/* Time in ns of the collective over n ranks: the faster of ring and (for all-reduce) tree. */
double coll_time_ns(const CollLink *link, CollKind k, double bytes, int n);

#endif
