/* collective.h: NCCL collectives (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all)
 * and point-to-point transfers (send, recv) as latency plus bytes over bus bandwidth, for the
 * ring and tree algorithms NCCL chooses between.
 *
 * Bus bytes follow nccl-tests: all-reduce moves 2 (n-1)/n of the buffer per rank, reduce-scatter,
 * all-gather and all-to-all (n-1)/n, broadcast 1, send and recv the whole buffer. Ring: (n-1)
 * latency steps (2 (n-1) for all-reduce); tree (all-reduce only): 2 log2(n) steps; all-to-all
 * (n-1 sends and receives issued together, as ncclGroupStart/End groups them), send and recv:
 * one step. The latency and bandwidth per collective come from a
 * least-squares fit (GSL) of measured NCCL points when the GPU has a calibrated link profile,
 * else from the link catalog (lua/hw/links.lua). */
#ifndef VR_COLLECTIVE_H
#define VR_COLLECTIVE_H

#include "vr.h"

typedef enum CollKind { COLL_ALLREDUCE = 0, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST,
                        COLL_ALLTOALL, COLL_SEND, COLL_RECV, COLL_COUNT } CollKind;

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

/* Parses "allreduce", "all_reduce", "reduce_scatter", "allgather", "all_gather", "broadcast",
 * "all_to_all", "alltoall", "send", "recv". */
VrStatus coll_kind_parse(const char *s, CollKind *out /* OUT */);

/* Bytes each rank moves over the link for a collective of `bytes` over n ranks. */
double coll_bus_bytes(CollKind k, double bytes, int n);

/* Fits latency + bus_bytes / bw to the points (GSL least squares, time against bus bytes).
 * VR_EINVAL with fewer than two usable points or a non-positive fitted bandwidth. */
VrStatus coll_fit(const CollPoint *pts, int n, CollLink *out /* OUT */);

/* Time in ns of the collective over n ranks: the faster of ring and (for all-reduce) tree. */
double coll_time_ns(const CollLink *link, CollKind k, double bytes, int n);

/* A collective whose ranks span several nodes: `per_node` ranks on each of `nodes` nodes of
 * `gpus_per_node` GPUs, the nodes joined by `nics_per_node` NICs each, rail-optimised (GPU i of
 * every node on the same rail, NIC i * nics / gpus_per_node, as on DGX/HGX systems). */
typedef struct CollNet {
    CollLink intra;          /* inside a node (NVLink/PCIe) */
    double nic_bw;           /* bytes/s per NIC, one direction */
    double nic_latency_ns;   /* per step across the network */
    int nics_per_node, gpus_per_node, per_node, nodes;
} CollNet;

/* The cross-node bus bandwidth of such a group (bytes/s): NCCL runs one ring (channel) per rail,
 * so each of the group's per_node GPUs drives its share of the node's NICs at once, and the bus
 * bandwidth nccl-tests reports is min(intra-node bus bandwidth, per_node / gpus_per_node *
 * nics_per_node * nic_bw): nics * nic_bw for a group that fills its nodes, one GPU's share for a
 * group of one rank per node. */
double coll_net_bus_bw(const CollNet *net);

/* Time in ns of the collective over such a group: ring, (n-1) steps (2 (n-1) for all-reduce) at
 * the slower of the two latencies, or for all-reduce NCCL's tree, 2 (ceil(log2 nodes) network
 * steps + per_node - 1 steps inside a node), at the same bus bandwidth; the faster of the two. */
double coll_net_time_ns(const CollNet *net, CollKind k, double bytes, int n);

#endif
