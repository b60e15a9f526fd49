/* mincut.c: Dinic's maximum flow and the residual reachability that gives the minimum cut (see
 * mincut.h). A breadth-first search labels each node with its distance from the source over
 * edges with residual capacity; depth-first searches then push flow along strictly increasing
 * labels (a blocking flow), with a per-node cursor so that no edge is tried twice in a phase.
 * An infinite capacity stays infinite under finite pushes; a path of infinite edges alone would
 * push an infinite flow, which mincut_solve refuses. The cut's sides come from a search backwards
 * from the sink once no augmenting path is left. */
#include "mincut.h"

#include <math.h>
#include <stdlib.h>

typedef struct Edge {
    int to;     /* head node */
    int next;   /* next edge out of the same tail, -1 none */
    double cap; /* residual capacity (INFINITY: never saturated) */
} Edge;

struct MinCut {
    int n;         /* nodes */
    int *head;     /* per node: its first edge, -1 none */
    Edge *e;       /* edges, each at an even index and its reverse at the next */
    int n_e, cap_e;
    int *level;    /* per node: BFS distance from the source, -1 unreached */
    int *cursor;   /* per node: the next edge its DFS tries in this phase */
    int *queue;    /* BFS queue, n entries */
};

VrStatus mincut_new(int n, MinCut **out) {
    *out = NULL;
    if (n < 2) return VR_EINVAL;
    MinCut *m = calloc(1, sizeof *m);
    if (!m) return VR_ENOMEM;
    m->n = n;
    m->head = malloc(sizeof(int) * (size_t)n);
    m->level = malloc(sizeof(int) * (size_t)n);
    m->cursor = malloc(sizeof(int) * (size_t)n);
    m->queue = malloc(sizeof(int) * (size_t)n);
    if (!m->head || !m->level || !m->cursor || !m->queue) {
        mincut_free(m);
        return VR_ENOMEM;
    }
    for (int v = 0; v < n; v++) m->head[v] = -1;
    *out = m;
    return VR_OK;
}

void mincut_free(MinCut *m) {
    if (!m) return;
    free(m->head);
    free(m->e);
    free(m->level);
    free(m->cursor);
    free(m->queue);
    free(m);
}

VrStatus mincut_add_edge(MinCut *m, int from, int to, double cap) {
    if (from < 0 || from >= m->n || to < 0 || to >= m->n || from == to || !(cap >= 0))
        return VR_EINVAL;
    if (m->n_e + 2 > m->cap_e) {
        int ncap = m->cap_e ? 2 * m->cap_e : 64;
        Edge *ne = realloc(m->e, sizeof(Edge) * (size_t)ncap);
        if (!ne) return VR_ENOMEM;
        m->e = ne;
        m->cap_e = ncap;
    }
    m->e[m->n_e] = (Edge){.to = to, .next = m->head[from], .cap = cap};
    m->head[from] = m->n_e++;
    m->e[m->n_e] = (Edge){.to = from, .next = m->head[to], .cap = 0};
    m->head[to] = m->n_e++;
    return VR_OK;
}

/* Labels every node with its residual distance from s; true when t is reached. */
static bool bfs(MinCut *m, int s, int t) {
    for (int v = 0; v < m->n; v++) m->level[v] = -1;
    int qh = 0, qt = 0;
    m->level[s] = 0;
    m->queue[qt++] = s;
    while (qh < qt) {
        int v = m->queue[qh++];
        for (int k = m->head[v]; k >= 0; k = m->e[k].next)
            if (m->e[k].cap > 0 && m->level[m->e[k].to] < 0) {
                m->level[m->e[k].to] = m->level[v] + 1;
                m->queue[qt++] = m->e[k].to;
            }
    }
    return m->level[t] >= 0;
}

/* Pushes at most f from v towards t along increasing labels; returns what it pushed. The
 * recursion is as deep as the BFS distance to t, at most n. */
static double dfs(MinCut *m, int v, int t, double f) {
    if (v == t) return f;
    for (; m->cursor[v] >= 0; m->cursor[v] = m->e[m->cursor[v]].next) {
        int k = m->cursor[v];
        Edge *e = &m->e[k];
        if (e->cap <= 0 || m->level[e->to] != m->level[v] + 1) continue;
        double got = dfs(m, e->to, t, f < e->cap ? f : e->cap);
        if (got > 0) {
            if (!isinf(m->e[k].cap)) m->e[k].cap -= got;
            if (!isinf(m->e[k ^ 1].cap)) m->e[k ^ 1].cap += got;
            return got;
        }
    }
    return 0;
}

VrStatus mincut_solve(MinCut *m, int source, int sink, double *value, unsigned char *side) {
    if (source < 0 || source >= m->n || sink < 0 || sink >= m->n || source == sink)
        return VR_EINVAL;
    double total = 0;
    while (bfs(m, source, sink)) {
        for (int v = 0; v < m->n; v++) m->cursor[v] = m->head[v];
        double f;
        while ((f = dfs(m, source, sink, INFINITY)) > 0) {
            if (isinf(f)) return VR_EINVAL; /* a path of infinite edges: no finite cut */
            total += f;
        }
    }
    /* the sink side: the nodes that reach the sink over residual capacity, found backwards from
     * it (edge k runs v -> w; its pair k ^ 1 is w -> v with its own residual capacity) */
    for (int v = 0; v < m->n; v++) m->level[v] = -1;
    int qh = 0, qt = 0;
    m->level[sink] = 0;
    m->queue[qt++] = sink;
    while (qh < qt) {
        int v = m->queue[qh++];
        for (int k = m->head[v]; k >= 0; k = m->e[k].next) {
            int w = m->e[k].to;
            if (m->e[k ^ 1].cap > 0 && m->level[w] < 0) {
                m->level[w] = 0;
                m->queue[qt++] = w;
            }
        }
    }
    for (int v = 0; v < m->n; v++) side[v] = m->level[v] < 0;
    *value = total;
    return VR_OK;
}
