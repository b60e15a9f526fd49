/* test_collective.c: NCCL collective costs: bus bytes, the least-squares fit, ring and tree. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "collective.h"
#include "device.h"

#include <string.h>

static void test_bus_bytes(void **state) {
    (void)state;
    assert_true(fabs(coll_bus_bytes(COLL_ALLREDUCE, 1000, 2) - 1000) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_ALLREDUCE, 1000, 8) - 1750) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_REDUCE_SCATTER, 1000, 4) - 750) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_BROADCAST, 1000, 4) - 1000) < 1e-9);
    assert_true(coll_bus_bytes(COLL_ALLGATHER, 1000, 1) == 0);
}

static void test_fit_recovers_latency_and_bandwidth(void **state) {
    (void)state;
    /* t = 20 us + bus_bytes / 300 GB/s */
    CollPoint pts[5];
    for (int i = 0; i < 5; i++) {
        double bus = (double)(1u << (20 + 2 * i));
        pts[i] = (CollPoint){bus, 2, 20000.0 + bus / 300e9 * 1e9};
    }
    CollLink l;
    assert_int_equal(coll_fit(pts, 5, &l), VR_OK);
    assert_true(fabs(l.latency_ns - 20000.0) < 1.0);
    assert_true(fabs(l.bus_bw - 300e9) / 300e9 < 1e-6);
}

static void test_fit_rejects_too_few_points(void **state) {
    (void)state;
    CollPoint one = {1e6, 2, 1e4};
    CollLink l;
    assert_int_equal(coll_fit(&one, 1, &l), VR_EINVAL);
    CollPoint flat[2] = {{1e6, 2, 1e4}, {2e6, 2, 1e4}}; /* no bandwidth term */
    assert_int_equal(coll_fit(flat, 2, &l), VR_EINVAL);
}

static void test_ring_and_tree(void **state) {
    (void)state;
    CollLink l = {5000.0, 100e9};
    /* reduce-scatter over 4 ranks: 3 steps of latency + 3/4 of the bytes */
    double t = coll_time_ns(&l, COLL_REDUCE_SCATTER, 4e9, 4);
    assert_true(fabs(t - (3 * 5000.0 + 3e9 / 100e9 * 1e9)) < 1e-3);
    /* all-reduce over 64 ranks, tiny buffer: the tree's 2 log2(64) = 12 steps beat 126 */
    double small = coll_time_ns(&l, COLL_ALLREDUCE, 1024, 64);
    assert_true(small < 13 * 5000.0 + 1.0);
    assert_true(coll_time_ns(&l, COLL_ALLREDUCE, 1e9, 1) == 0);
    CollKind k;
    assert_int_equal(coll_kind_parse("all_gather", &k), VR_OK);
    assert_int_equal(k, COLL_ALLGATHER);
    assert_int_equal(coll_kind_parse("nccl_magic", &k), VR_EINVAL);
}

/* All-to-all moves (n-1)/n of its buffer in one grouped step; send and recv move the whole
 * buffer in one step. */
static void test_alltoall_and_p2p(void **state) {
    (void)state;
    CollKind k;
    assert_int_equal(coll_kind_parse("all_to_all", &k), VR_OK);
    assert_int_equal(k, COLL_ALLTOALL);
    assert_int_equal(coll_kind_parse("alltoall", &k), VR_OK);
    assert_int_equal(coll_kind_parse("send", &k), VR_OK);
    assert_int_equal(k, COLL_SEND);
    assert_int_equal(coll_kind_parse("recv", &k), VR_OK);
    assert_int_equal(k, COLL_RECV);
    assert_true(fabs(coll_bus_bytes(COLL_ALLTOALL, 1000, 8) - 875) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_SEND, 1000, 2) - 1000) < 1e-9);
    CollLink l = {5000.0, 100e9};
    assert_true(fabs(coll_time_ns(&l, COLL_ALLTOALL, 8e9, 8) - (5000.0 + 7e9 / 100e9 * 1e9)) < 1e-3);
    assert_true(fabs(coll_time_ns(&l, COLL_RECV, 1e9, 2) - (5000.0 + 1e9 / 100e9 * 1e9)) < 1e-3);
}

/* A collective on the compute stream (tensor parallelism's, which the next kernel waits for) is
 * priced as the collective it is, by its kind and group, not as a memory-bound kernel. */
static void test_collective_on_compute_stream(void **state) {
    (void)state;
    DeviceSpec d;
    memset(&d, 0, sizeof d);
    d.world = 8, d.gpus_per_node = 8, d.coll_bw = 390e9, d.coll_latency_ns = 3000;
    d.mem_bw = 4.8e12, d.eff_memory = 0.85, d.launch_ns = 5000;
    Op op;
    memset(&op, 0, sizeof op);
    op.kind = "all_gather", op.kind_id = OPK_COLLECTIVE, op.stream = STREAM_COMPUTE;
    op.bytes_moved = 64.0 * 1048576, op.world = 8;
    double want = device_collective_ns(&d, "all_gather", op.bytes_moved, 8, 0);
    assert_true(want > 0);
    assert_true(fabs(device_op_ns(&d, &op) - want) < 1e-6);
    /* on the compute stream a "broadcast" of no group is the broadcasting kernel, bound by memory */
    op.kind = "broadcast", op.world = 1;
    double kernel = op.bytes_moved / (d.mem_bw * d.eff_memory) * 1e9 + d.launch_ns;
    assert_true(fabs(device_op_ns(&d, &op) - kernel) < 1e-6);
}

/* Across nodes, a group that fills its nodes drives all their NICs at once (rail-optimised), a
 * group of one rank per node only its own GPU's; NVLink still caps the bus bandwidth. HSDP's
 * replicate all-reduce is such a strided group, its shard collectives stay inside a node. */
static void test_across_nodes(void **state) {
    (void)state;
    CollNet net = {.intra = {3000, 390e9}, .nic_bw = 47e9, .nic_latency_ns = 1500,
                   .nics_per_node = 8, .gpus_per_node = 8, .per_node = 8, .nodes = 16};
    assert_true(fabs(coll_net_bus_bw(&net) - 8 * 47e9) < 1);
    net.per_node = 1;
    assert_true(fabs(coll_net_bus_bw(&net) - 47e9) < 1);
    net.per_node = 8, net.nics_per_node = 16, net.nic_bw = 50e9; /* 800 GB/s of NICs: NVLink caps */
    assert_true(fabs(coll_net_bus_bw(&net) - 390e9) < 1);

    DeviceSpec d;
    memset(&d, 0, sizeof d);
    d.world = 128, d.gpus_per_node = 8, d.nics_per_node = 8, d.nic_bw = 47e9, d.nic_latency_ns = 1500;
    d.coll_bw = 390e9, d.coll_latency_ns = 3000;
    double gib = 1073741824.0;
    /* a full-world reduce-scatter of 1 GiB: 127/128 GiB at 8 x 47 GB/s plus 127 steps */
    double rs = device_collective_ns(&d, "reduce_scatter", gib, 128, 0);
    assert_true(fabs(rs - (127.0 / 128 * gib / 376e9 * 1e9 + 127 * 3000)) < 1);
    /* one NIC per node: eight times the data term */
    d.nics_per_node = 1;
    double rs1 = device_collective_ns(&d, "reduce_scatter", gib, 128, 0);
    assert_true(fabs((rs1 - 127 * 3000) - 8 * (rs - 127 * 3000)) < 1);
    /* HSDP, shard groups of 8 (one node each), replicate groups of 16 (one rank per node) */
    d.nics_per_node = 8, d.replicate = 16;
    double ag = device_collective_ns(&d, "all_gather", gib, 8, 0);
    assert_true(fabs(ag - (7.0 / 8 * gib / 390e9 * 1e9 + 7 * 3000)) < 1); /* NVLink only */
    double ar = device_collective_ns(&d, "allreduce", gib, 16, 0);
    double data = 2 * 15.0 / 16 * gib / 47e9 * 1e9;
    assert_true(ar >= data && ar < data + 30 * 3000);
    /* the same all-reduce over 16 consecutive ranks (two full nodes) is eight times faster in data */
    d.replicate = 0;
    double ar2 = device_collective_ns(&d, "allreduce", gib, 16, 0);
    assert_true(ar2 < ar / 7);
    /* a group the mesh places one rank a node (a data-parallel group that tensor parallelism
     * strides across nodes): its 2 ranks use one NIC of each of 2 nodes, not one node's NVLink */
    double in_node = device_collective_ns(&d, "reduce_scatter", gib, 2, 0);
    double strided = device_collective_ns(&d, "reduce_scatter", gib, 2, 1);
    assert_true(fabs(in_node - (0.5 * gib / 390e9 * 1e9 + 3000)) < 1);
    assert_true(fabs(strided - (0.5 * gib / 47e9 * 1e9 + 3000)) < 1);
    /* per_node above the node's GPUs is capped at them: 16 ranks at most 8 a node */
    assert_true(fabs(device_collective_ns(&d, "allreduce", gib, 16, 16) - ar2) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bus_bytes),
        cmocka_unit_test(test_fit_recovers_latency_and_bandwidth),
        cmocka_unit_test(test_fit_rejects_too_few_points),
        cmocka_unit_test(test_ring_and_tree),
        cmocka_unit_test(test_across_nodes),
        cmocka_unit_test(test_alltoall_and_p2p),
        cmocka_unit_test(test_collective_on_compute_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
