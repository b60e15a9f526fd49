/* mincut.h: a minimum s-t cut of a small directed graph with capacities, by maximum flow
 * (Dinic's algorithm), for torch.compile's partitioner (lua/strategies/compile.lua): AOTAutograd's
 * min_cut_rematerialization_partition (torch/_functorch/partitioners.py solve_min_cut) builds a
 * graph of each forward node split in two (node_in -> node_out weighted by the bytes saving it
 * would cost), cuts it with networkx's minimum_cut, and saves the nodes whose edge the cut crosses.
 *
 * Data model: nodes 0 .. n-1; each edge added is stored with its reverse (capacity 0) in one
 * array, adjacency as per-node linked lists through it. Capacities are doubles >= 0; INFINITY is
 * an edge the cut may never cross. Invariants after mincut_solve:
 *   0 <= flow(e) <= cap(e) for every edge; in(v) == out(v) for every v but source and sink;
 *   the value returned == the flow out of the source == the sum of the capacities of the edges
 *   from a source-side node to a sink-side node (max-flow min-cut).
 * The sink side is the set of nodes that reach the sink in the residual graph, the source side
 * every other node: of the minimum cuts, the one with the largest source side, as networkx's
 * minimum_cut returns it (its `non_reachable`: shortest_path_length(R, target=t) over the residual
 * network), so that the partitioner's choice among equal cuts is networkx's. */
#ifndef VR_MINCUT_H
#define VR_MINCUT_H

#include "vr.h"

typedef struct MinCut MinCut;

/* A graph of n nodes (n >= 2) and no edges, into *out (the caller owns it: mincut_free).
 * VR_EINVAL for n < 2, VR_ENOMEM on host allocation failure (*out then NULL). */
VrStatus mincut_new(int n, MinCut **out /* OUT */);
void mincut_free(MinCut *m);

/* Adds the edge from -> to of capacity cap (>= 0, INFINITY allowed). VR_EINVAL for a node out of
 * range, a loop or a negative or NaN capacity; VR_ENOMEM on host allocation failure (the graph
 * then unchanged). Parallel edges add up. */
VrStatus mincut_add_edge(MinCut *m, int from, int to, double cap);

/* Solves the maximum flow from source to sink: *value the cut's capacity, side[v] 1 for a node on
 * the source side, 0 otherwise (side: n bytes the caller provides). VR_EINVAL when source or sink
 * is out of range or equal, or when every cut is infinite (a path of infinite edges from source
 * to sink: nothing can be saved that makes the backward computable). May be called once. */
VrStatus mincut_solve(MinCut *m, int source, int sink, double *value /* OUT */,
                      unsigned char *side /* OUT */);

#endif
