/* test_graph.c: autograd derivation of sim/graph.c on small graphs built through the C API.
 *
 * Each test builds a forward graph by hand (graph_add_tensor / graph_add_op), derives the
 * backward with graph_derive_backward and checks what autograd would do: one backward node per
 * forward op that needs one, in reverse order; saved tensors released by their backward op;
 * gradients of tensors with several consumers accumulated (InputBuffer); a parameter's first
 * gradient stolen into .grad; pass-through gradients; and the error paths. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "fail_hook.h"

/* ---- fixtures and builders ------------------------------------------------------------- */

static int setup_graph(void **state) {
    Graph *g = NULL;
    if (graph_new(&g) != VR_OK) return -1;
    *state = g;
    return 0;
}

static int teardown_graph(void **state) {
    graph_free(*state);
    return 0;
}

/* A trainable parameter of `bytes` (persistent, requires grad). */
static int add_param(Graph *g, const char *name, uint64_t bytes) {
    Tensor t = {.name = name, .bytes = bytes, .numel = bytes / 4, .dtype = DT_FP32,
                .cat = CAT_PARAM, .base = -1, .producer = -1, .module = -1,
                .requires_grad = true, .is_param = true, .trainable = true, .persistent = true};
    int id = -1;
    assert_int_equal(graph_add_tensor(g, &t, &id), VR_OK);
    return id;
}

/* A frozen parameter (no grad). */
static int add_frozen(Graph *g, const char *name, uint64_t bytes) {
    Tensor t = {.name = name, .bytes = bytes, .numel = bytes / 4, .dtype = DT_FP32,
                .cat = CAT_PARAM, .base = -1, .producer = -1, .module = -1,
                .is_param = true, .persistent = true};
    int id = -1;
    assert_int_equal(graph_add_tensor(g, &t, &id), VR_OK);
    return id;
}

/* An activation (output of a forward op) that requires grad when rg. */
static int add_act(Graph *g, const char *name, uint64_t bytes, bool rg) {
    Tensor t = {.name = name, .bytes = bytes, .numel = bytes / 4, .dtype = DT_FP32,
                .cat = CAT_ACTIVATION, .base = -1, .producer = -1, .module = -1,
                .requires_grad = rg};
    int id = -1;
    assert_int_equal(graph_add_tensor(g, &t, &id), VR_OK);
    return id;
}

/* A forward op with up to 3 inputs, one output (or none when out < 0), the given saved
 * tensors, and a GradSpec per input (NULL: GRAD_NEW for every input). Frees = inputs. */
static int add_fwd(Graph *g, const char *name, const int *in, int nin, int out, const int *saves,
                   int nsaves, const GradSpec *grads) {
    GradSpec def[3];
    for (int i = 0; i < 3; i++) def[i] = (GradSpec){.mode = GRAD_NEW, .grad_dtype = DT_FP32};
    int outs[1] = {out};
    Op op = {.name = name, .kind = "elementwise", .phase = PH_FWD, .fwd_op = -1,
             .inputs = (int *)in, .n_inputs = nin, .outputs = outs, .n_outputs = out >= 0,
             .saves = (int *)saves, .n_saves = nsaves, .frees = (int *)in, .n_frees = nin,
             .grads = (GradSpec *)(grads ? grads : def), .flops = 100, .layer = -1};
    int id = -1;
    assert_int_equal(graph_add_op(g, &op, &id), VR_OK);
    return id;
}

static bool contains(const int *a, int n, int x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return true;
    return false;
}

/* The backward op derived from forward op f, -1 if none. */
static int backward_of(const Graph *g, int f) {
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *op = graph_op_c(g, i);
        if (op->phase == PH_BWD && op->fwd_op == f && strstr(op->name, ".backward")) return i;
    }
    return -1;
}

/* The first op whose name starts with prefix, -1 if none. */
static int op_named(const Graph *g, const char *prefix) {
    for (int i = 0; i < graph_num_ops(g); i++)
        if (strncmp(graph_op_c(g, i)->name, prefix, strlen(prefix)) == 0) return i;
    return -1;
}

static int count_named(const Graph *g, const char *prefix) {
    int n = 0;
    for (int i = 0; i < graph_num_ops(g); i++)
        n += strncmp(graph_op_c(g, i)->name, prefix, strlen(prefix)) == 0;
    return n;
}

/* ---- tests ------------------------------------------------------------------------------ */

/* p -> f1 -> t1 -> f2 -> t2 -> f3 -> loss: ones_like(loss), then f3, f2, f1 backward. */
static void test_linear_chain_reverse_order(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 1024);
    int t1 = add_act(g, "t1", 2048, true), t2 = add_act(g, "t2", 4096, true);
    int loss = add_act(g, "loss", 4, true);
    int f1 = add_fwd(g, "f1", (int[]){p}, 1, t1, NULL, 0, NULL);
    int f2 = add_fwd(g, "f2", (int[]){t1}, 1, t2, (int[]){t1}, 1, NULL);
    int f3 = add_fwd(g, "f3", (int[]){t2}, 1, loss, (int[]){t2}, 1, NULL);
    int n_fwd = graph_num_ops(g);
    assert_int_equal(n_fwd, 3);
    assert_int_equal(graph_tensor_c(g, t1)->producer, f1);
    assert_int_equal(graph_tensor_c(g, loss)->producer, f3);

    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    /* ones_like(loss) + exactly one backward op per forward op, nothing else */
    assert_int_equal(graph_num_ops(g), n_fwd + 1 + 3);
    int seed_op = n_fwd;
    assert_string_equal(graph_op_c(g, seed_op)->name, "ones_like(loss)");
    assert_int_equal(graph_op_c(g, seed_op)->phase, PH_BWD);
    int b3 = backward_of(g, f3), b2 = backward_of(g, f2), b1 = backward_of(g, f1);
    assert_int_equal(b3, n_fwd + 1);
    assert_int_equal(b2, n_fwd + 2);
    assert_int_equal(b1, n_fwd + 3);
    assert_string_equal(graph_op_c(g, b3)->name, "f3.backward");
    for (int i = n_fwd; i < graph_num_ops(g); i++)
        assert_int_equal(graph_op_c(g, i)->phase, PH_BWD);

    /* the gradients chain: the output of one backward op is the input of the next */
    const Op *o3 = graph_op_c(g, b3), *o2 = graph_op_c(g, b2), *o1 = graph_op_c(g, b1);
    int seed = graph_op_c(g, seed_op)->outputs[0];
    assert_true(contains(o3->inputs, o3->n_inputs, seed));
    assert_int_equal(o3->n_outputs, 1);
    assert_int_equal(graph_tensor_c(g, o3->outputs[0])->bytes, 4096); /* grad of t2 */
    assert_true(contains(o2->inputs, o2->n_inputs, o3->outputs[0]));
    assert_int_equal(graph_tensor_c(g, o2->outputs[0])->bytes, 2048); /* grad of t1 */
    assert_true(contains(o1->inputs, o1->n_inputs, o2->outputs[0]));
    /* each backward op drops the incoming gradient */
    assert_true(contains(o3->frees, o3->n_frees, seed));
    assert_true(contains(o2->frees, o2->n_frees, o3->outputs[0]));
    assert_true(contains(o1->frees, o1->n_frees, o2->outputs[0]));
    /* the loss is released by the seed op; activation gradients are temporaries */
    assert_true(contains(graph_op_c(g, seed_op)->frees, graph_op_c(g, seed_op)->n_frees, loss));
    assert_int_equal(graph_tensor_c(g, o3->outputs[0])->cat, CAT_TEMP);
    assert_false(graph_tensor_c(g, o3->outputs[0])->persistent);
    /* the backward cost defaults to twice the forward */
    assert_true(o3->flops == 200.0);
}

/* A collective's backward is the conjugate its op names (bwd_kind), over the same group:
 * tensor parallelism's all-gather of the sequence reduce-scatters the gradient among the same
 * ranks, a gradient of the input's size. */
static void test_collective_backward_is_its_conjugate(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 1024);
    int x = add_act(g, "x", 1024, true), gathered = add_act(g, "gathered", 4096, true);
    int loss = add_act(g, "loss", 4, true);
    add_fwd(g, "f", (int[]){p}, 1, x, NULL, 0, NULL);
    GradSpec gs[1] = {{.mode = GRAD_NEW, .grad_dtype = DT_FP32, .grad_bytes = 1024}};
    int outs[1] = {gathered};
    Op ag = {.name = "all_gather", .kind = "all_gather", .bwd_kind = "reduce_scatter", .phase = PH_FWD,
             .fwd_op = -1, .inputs = (int[]){x}, .n_inputs = 1, .outputs = outs, .n_outputs = 1,
             .frees = (int[]){x}, .n_frees = 1, .grads = gs, .bytes_moved = 4096, .world = 4, .layer = -1};
    int f_ag = -1;
    assert_int_equal(graph_add_op(g, &ag, &f_ag), VR_OK);
    add_fwd(g, "head", (int[]){gathered}, 1, loss, (int[]){gathered}, 1, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int b = backward_of(g, f_ag);
    assert_true(b >= 0);
    const Op *bo = graph_op_c(g, b);
    assert_string_equal(bo->kind, "reduce_scatter");
    assert_int_equal(bo->kind_id, OPK_COLLECTIVE);
    assert_int_equal(bo->world, 4);
    assert_int_equal(bo->stream, STREAM_COMPUTE);
    assert_int_equal(bo->n_outputs, 1);
    assert_int_equal(graph_tensor_c(g, bo->outputs[0])->bytes, 1024);
}

/* Saved tensors are inputs of the backward op and are in its frees (released after it ran). */
static void test_saved_tensors_freed_by_backward(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 512);
    int x = add_act(g, "x", 1024, true), y = add_act(g, "y", 1024, true);
    int loss = add_act(g, "loss", 4, true);
    add_fwd(g, "make_x", (int[]){p}, 1, x, NULL, 0, NULL);
    int f = add_fwd(g, "mul", (int[]){x, p}, 2, y, (int[]){x, p}, 2, NULL);
    int l = add_fwd(g, "sum", (int[]){y}, 1, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int b = backward_of(g, f);
    assert_true(b >= 0);
    const Op *ob = graph_op_c(g, b);
    assert_true(contains(ob->inputs, ob->n_inputs, x));
    assert_true(contains(ob->inputs, ob->n_inputs, p));
    assert_true(contains(ob->frees, ob->n_frees, x));
    assert_true(contains(ob->frees, ob->n_frees, p));
    /* no other backward op releases x */
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *o = graph_op_c(g, i);
        if (i == b || o->phase != PH_BWD) continue;
        assert_false(contains(o->frees, o->n_frees, x));
    }
    /* the op that saved nothing has a backward that frees only its incoming gradient */
    const Op *ol = graph_op_c(g, backward_of(g, l));
    assert_int_equal(ol->n_frees, 1);
    assert_int_equal(ol->n_inputs, 1);
}

/* x has two consumers; the first gradient to arrive (from the later consumer) is a fresh,
 * non-view buffer, so InputBuffer adds the second one into it in place. */
static void test_two_consumers_accumulate_in_place(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 1024);
    int x = add_act(g, "x", 2048, true), a = add_act(g, "a", 2048, true);
    int b = add_act(g, "b", 2048, true), loss = add_act(g, "loss", 4, true);
    add_fwd(g, "fx", (int[]){p}, 1, x, NULL, 0, NULL);
    int fa = add_fwd(g, "fa", (int[]){x}, 1, a, NULL, 0, NULL);
    int fb = add_fwd(g, "fb", (int[]){x}, 1, b, NULL, 0, NULL);
    add_fwd(g, "fl", (int[]){a, b}, 2, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int bb = backward_of(g, fb), ba = backward_of(g, fa);
    assert_true(bb >= 0 && ba > bb); /* reverse order of creation */
    int acc = op_named(g, "InputBuffer::accumulate");
    assert_true(acc > ba);
    const Op *oa = graph_op_c(g, acc);
    assert_string_equal(oa->name, "InputBuffer::accumulate(add_)");
    assert_int_equal(oa->n_outputs, 0); /* in place: no new buffer */
    int gb = graph_op_c(g, bb)->outputs[0], ga = graph_op_c(g, ba)->outputs[0];
    assert_int_equal(oa->n_inputs, 2);
    assert_int_equal(oa->inputs[0], gb);
    assert_int_equal(oa->inputs[1], ga);
    assert_int_equal(oa->n_frees, 1); /* the added gradient is dropped */
    assert_int_equal(oa->frees[0], ga);
    /* the accumulated buffer flows on into fx's backward */
    const Op *ox = graph_op_c(g, backward_of(g, 0));
    assert_true(contains(ox->inputs, ox->n_inputs, gb));
    assert_true(contains(ox->frees, ox->n_frees, gb));
    assert_int_equal(count_named(g, "InputBuffer"), 1);
}

/* The same with the first gradient returned as a view (GradSpec.view, as matmul does):
 * it cannot be added into, so InputBuffer makes a new sum and drops both. */
static void test_two_consumers_accumulate_out_of_place_for_view(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 1024);
    int x = add_act(g, "x", 2048, true), a = add_act(g, "a", 2048, true);
    int b = add_act(g, "b", 2048, true), loss = add_act(g, "loss", 4, true);
    GradSpec view[1] = {{.mode = GRAD_NEW, .grad_dtype = DT_FP32, .view = true}};
    add_fwd(g, "fx", (int[]){p}, 1, x, NULL, 0, NULL);
    int fa = add_fwd(g, "fa", (int[]){x}, 1, a, NULL, 0, NULL);
    int fb = add_fwd(g, "fb", (int[]){x}, 1, b, NULL, 0, view); /* first to arrive */
    add_fwd(g, "fl", (int[]){a, b}, 2, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int gb = graph_op_c(g, backward_of(g, fb))->outputs[0];
    int ga = graph_op_c(g, backward_of(g, fa))->outputs[0];
    assert_true(graph_tensor_c(g, gb)->grad_view);
    assert_false(graph_tensor_c(g, ga)->grad_view);
    int acc = op_named(g, "InputBuffer::accumulate");
    assert_true(acc >= 0);
    const Op *oa = graph_op_c(g, acc);
    assert_string_equal(oa->name, "InputBuffer::accumulate");
    assert_int_equal(oa->n_outputs, 1); /* out of place */
    int sum = oa->outputs[0];
    assert_int_equal(graph_tensor_c(g, sum)->bytes, 2048);
    assert_int_equal(graph_tensor_c(g, sum)->cat, CAT_TEMP);
    assert_int_equal(oa->n_frees, 2);
    assert_true(contains(oa->frees, 2, ga));
    assert_true(contains(oa->frees, 2, gb));
    /* the sum is what reaches fx's backward */
    const Op *ox = graph_op_c(g, backward_of(g, 0));
    assert_true(contains(ox->inputs, ox->n_inputs, sum));
    assert_false(contains(ox->inputs, ox->n_inputs, gb));
}

/* AccumulateGrad: the first fresh gradient of a trainable parameter becomes its .grad
 * (CAT_GRAD, persistent); a second use adds into .grad in place. */
static void test_param_grad_is_stolen(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096);
    int x = add_act(g, "x", 1024, true), loss = add_act(g, "loss", 4, true);
    int fx = add_fwd(g, "fx", (int[]){w}, 1, x, NULL, 0, NULL);
    add_fwd(g, "fl", (int[]){x, w}, 2, loss, (int[]){x, w}, 2, NULL); /* w used twice */
    assert_int_equal(graph_param_grad(g, w), -1); /* not derived yet */
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int gw = graph_param_grad(g, w);
    assert_true(gw >= 0);
    const Tensor *tg = graph_tensor_c(g, gw);
    assert_int_equal(tg->cat, CAT_GRAD);
    assert_true(tg->persistent);
    assert_int_equal(tg->bytes, 4096);
    /* the .grad is the buffer fl's backward produced (stolen, not copied) */
    const Op *ol = graph_op_c(g, backward_of(g, 1));
    assert_true(contains(ol->outputs, ol->n_outputs, gw));
    assert_int_equal(count_named(g, "AccumulateGrad(copy)"), 0);
    /* fx's backward gradient of w is added into .grad in place and then dropped */
    int acc = op_named(g, "AccumulateGrad(add_)");
    assert_true(acc > backward_of(g, fx));
    const Op *oa = graph_op_c(g, acc);
    int gw2 = graph_op_c(g, backward_of(g, fx))->outputs[0];
    assert_int_equal(oa->n_outputs, 0);
    assert_int_equal(oa->inputs[0], gw);
    assert_int_equal(oa->inputs[1], gw2);
    assert_int_equal(oa->n_frees, 1);
    assert_int_equal(oa->frees[0], gw2);
    assert_false(graph_tensor_c(g, gw2)->persistent);
    /* non-parameters and out-of-range indices have no .grad */
    assert_int_equal(graph_param_grad(g, x), -1);
    assert_int_equal(graph_param_grad(g, -1), -1);
    assert_int_equal(graph_param_grad(g, 100000), -1);
}

/* A parameter used twice whose first gradient arrives as a view (a Linear's weight gradient, a
 * tied embedding's lm_head): autograd sums the two in the AccumulateGrad node's InputBuffer, out
 * of place since a view cannot be added into, and .grad takes the sum; both gradients are freed
 * by the sum (the trace of a tied Llama-3.2-3B: a third embedding-sized block, then the other two
 * freed). */
static void test_param_used_twice_view_grad_sums_out_of_place(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096);
    int x = add_act(g, "x", 1024, true), loss = add_act(g, "loss", 4, true);
    GradSpec second_view[2] = {{.mode = GRAD_NEW, .grad_dtype = DT_FP32},
                               {.mode = GRAD_NEW, .grad_dtype = DT_FP32, .view = true}};
    int fx = add_fwd(g, "fx", (int[]){w}, 1, x, NULL, 0, NULL);
    add_fwd(g, "fl", (int[]){x, w}, 2, loss, (int[]){x, w}, 2, second_view);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int acc = op_named(g, "InputBuffer::accumulate");
    assert_true(acc > backward_of(g, fx));
    assert_int_equal(count_named(g, "AccumulateGrad"), 0);
    const Op *oa = graph_op_c(g, acc);
    int first = graph_op_c(g, backward_of(g, 1))->outputs[1];  /* fl's gradient of w */
    int second = graph_op_c(g, backward_of(g, fx))->outputs[0];
    assert_true(graph_tensor_c(g, first)->grad_view);
    assert_int_equal(oa->n_inputs, 2);
    assert_int_equal(oa->inputs[0], first);
    assert_int_equal(oa->inputs[1], second);
    assert_int_equal(oa->n_outputs, 1);
    int sum = oa->outputs[0];
    assert_int_equal(graph_param_grad(g, w), sum);
    assert_int_equal(graph_tensor_c(g, sum)->cat, CAT_GRAD);
    assert_true(graph_tensor_c(g, sum)->persistent);
    assert_int_equal(graph_tensor_c(g, sum)->bytes, 4096);
    /* the first was .grad only until the second came: a temporary now, freed with the second */
    assert_int_equal(graph_tensor_c(g, first)->cat, CAT_TEMP);
    assert_false(graph_tensor_c(g, first)->persistent);
    assert_int_equal(oa->n_frees, 2);
    assert_true(contains(oa->frees, 2, first));
    assert_true(contains(oa->frees, 2, second));
}

/* GRAD_PASS: the backward op allocates nothing for that input; the output's gradient flows
 * through unchanged to the input's producer. A passed (shared) gradient reaching a parameter
 * is copied into a new .grad. */
static void test_grad_pass_allocates_nothing(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 2048);
    int t1 = add_act(g, "t1", 2048, true), t2 = add_act(g, "t2", 2048, true);
    int loss = add_act(g, "loss", 4, true);
    GradSpec pass[1] = {{.mode = GRAD_PASS, .pass_output = 0}};
    int f1 = add_fwd(g, "f1", (int[]){w}, 1, t1, NULL, 0, NULL);
    int f2 = add_fwd(g, "add_bias", (int[]){t1}, 1, t2, NULL, 0, pass);
    int f3 = add_fwd(g, "f3", (int[]){t2}, 1, loss, NULL, 0, NULL);
    int n_t = graph_num_tensors(g);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    const Op *o3 = graph_op_c(g, backward_of(g, f3));
    const Op *o2 = graph_op_c(g, backward_of(g, f2));
    const Op *o1 = graph_op_c(g, backward_of(g, f1));
    assert_int_equal(o2->n_outputs, 0);
    int g2 = o3->outputs[0];
    assert_true(contains(o2->inputs, o2->n_inputs, g2));
    assert_true(contains(o1->inputs, o1->n_inputs, g2)); /* the same buffer, passed on */
    /* new tensors: seed, grad t2 (f3), grad w (f1); nothing for the pass-through */
    assert_int_equal(graph_num_tensors(g), n_t + 3);

    /* now pass straight into a parameter: .grad is a copy of the shared buffer */
    Graph *h = NULL;
    assert_int_equal(graph_new(&h), VR_OK);
    int hw = add_param(h, "w", 2048);
    int hy = add_act(h, "y", 2048, true), hl = add_act(h, "loss", 4, true);
    add_fwd(h, "view_w", (int[]){hw}, 1, hy, NULL, 0, pass);
    add_fwd(h, "f", (int[]){hy}, 1, hl, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(h, hl), VR_OK);
    int c = op_named(h, "AccumulateGrad(copy)");
    assert_true(c >= 0);
    int gw = graph_param_grad(h, hw);
    assert_true(gw >= 0);
    assert_int_equal(graph_op_c(h, c)->n_outputs, 1);
    assert_int_equal(graph_op_c(h, c)->outputs[0], gw);
    assert_int_equal(graph_tensor_c(h, gw)->cat, CAT_GRAD);
    assert_true(graph_tensor_c(h, gw)->persistent);
    graph_free(h);
}

/* GRAD_SAVED: a loss that computes its input gradients in forward (Liger's fused linear
 * cross-entropy) saves them, and its backward hands them on: no new buffer, the saved tensors
 * not dropped by it; a parameter's becomes its .grad (stolen), an activation's is dropped by the
 * backward that consumes it. A saved index past the op's saves is VR_EINVAL. */
static void test_grad_saved_handed_on(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096);
    int h = add_act(g, "h", 1024, true), hn = add_act(g, "hn", 1024, true);
    int gi = add_act(g, "grad_input", 1024, false), gw = add_act(g, "grad_weight", 4096, false);
    int loss = add_act(g, "loss", 4, true);
    int fn = add_fwd(g, "norm", (int[]){h}, 1, hn, (int[]){h}, 1, NULL);
    add_fwd(g, "zeros_gi", NULL, 0, gi, NULL, 0, NULL);
    add_fwd(g, "zeros_gw", NULL, 0, gw, NULL, 0, NULL);
    GradSpec saved[2] = {{.mode = GRAD_SAVED, .pass_output = 0}, {.mode = GRAD_SAVED, .pass_output = 1}};
    int fl = add_fwd(g, "fused_loss", (int[]){hn, w}, 2, loss, (int[]){gi, gw}, 2, saved);
    int n_t = graph_num_tensors(g);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    const Op *ol = graph_op_c(g, backward_of(g, fl));
    assert_int_equal(ol->n_outputs, 0);
    assert_false(contains(ol->frees, ol->n_frees, gi));
    assert_false(contains(ol->frees, ol->n_frees, gw));
    assert_int_equal(graph_param_grad(g, w), gw);
    assert_int_equal(graph_tensor_c(g, gw)->cat, CAT_GRAD);
    assert_true(graph_tensor_c(g, gw)->persistent);
    const Op *on = graph_op_c(g, backward_of(g, fn));
    assert_true(contains(on->inputs, on->n_inputs, gi));
    assert_true(contains(on->frees, on->n_frees, gi));
    /* new tensors: the seed and the norm's input gradient */
    assert_int_equal(graph_num_tensors(g), n_t + 2);

    GradSpec bad[1] = {{.mode = GRAD_SAVED, .pass_output = 1}};
    int outs[1] = {add_act(g, "y", 4, true)};
    Op op = {.name = "bad", .kind = "elementwise", .phase = PH_FWD, .fwd_op = -1,
             .inputs = (int[]){h}, .n_inputs = 1, .outputs = outs, .n_outputs = 1,
             .saves = (int[]){gi}, .n_saves = 1, .grads = bad, .layer = -1};
    int id;
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
}

/* Op.hook 3, a post-accumulate-grad hook: its copy runs just after its parameter's last gradient
 * of the pass is accumulated (a weight used twice: after the second), before the backward of
 * ops created earlier, and takes the .grad as an input (freeing it with free_grads, after which
 * the parameter has no .grad). A hook 3
 * without a parameter is VR_EINVAL. */
static void test_post_accumulate_grad_hook(void **state) {
    Graph *g = *state;
    int w1 = add_param(g, "w1", 2048), w2 = add_param(g, "w2", 4096);
    int x = add_act(g, "x", 1024, true), y = add_act(g, "y", 1024, true);
    int loss = add_act(g, "loss", 4, true);
    int f1 = add_fwd(g, "f1", (int[]){w1}, 1, x, NULL, 0, NULL);
    int f2 = add_fwd(g, "f2", (int[]){x, w2}, 2, y, (int[]){x, w2}, 2, NULL);
    int f3 = add_fwd(g, "f3", (int[]){y, w2}, 2, loss, (int[]){y, w2}, 2, NULL);
    int hooks[2];
    for (int k = 0; k < 2; k++) {
        int p = k == 0 ? w1 : w2;
        Op h = {.name = k == 0 ? "step w1" : "step w2", .kind = "elementwise", .phase = PH_BWD,
                .fwd_op = -1, .hook = 3, .grads_of = (int[]){p}, .n_grads_of = 1,
                .free_grads = true, .drop_persistent = true, .layer = -1};
        assert_int_equal(graph_add_op(g, &h, &hooks[k]), VR_OK);
    }
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int s1 = -1, s2 = -1;
    for (int i = hooks[1] + 1; i < graph_num_ops(g); i++)
        if (strcmp(graph_op_c(g, i)->name, "step w2") == 0) s2 = i;
        else if (strcmp(graph_op_c(g, i)->name, "step w1") == 0) s1 = i;
    assert_true(s1 > 0 && s2 > 0);
    /* w2's gradients come from f3's and f2's backward: its step follows the second, and comes
     * before f1's backward; w1's follows f1's */
    assert_true(s2 > backward_of(g, f2));
    assert_true(s2 < backward_of(g, f1));
    assert_true(s1 > backward_of(g, f1));
    assert_true(backward_of(g, f3) < backward_of(g, f2));
    const Op *o2 = graph_op_c(g, s2);
    /* its input is w2's .grad, which it frees; that leaves w2 without a .grad (param.grad =
     * None), so a later pass makes a new one rather than adding into the freed one */
    assert_int_equal(o2->n_inputs, 1);
    int gw2 = o2->inputs[0];
    assert_true(contains(o2->frees, o2->n_frees, gw2));
    assert_int_equal(graph_param_grad(g, w2), -1);
    assert_int_equal(o2->phase, PH_BWD);
    assert_int_equal(o2->hook, 0);

    Op bad = {.name = "bad", .kind = "none", .phase = PH_BWD, .fwd_op = -1, .hook = 3, .layer = -1};
    int id;
    assert_int_equal(graph_add_op(g, &bad, &id), VR_EINVAL);
}

/* Op.hook 4 (a saved tensor brought back, as activation offloading's unpack does): its copy runs
 * just before the backward node of its before_op; its output replaces the saved tensor there
 * (remap_of), and that node drops it when done, while the original is no longer held for
 * backward. One with neither a region nor an earlier op is VR_EINVAL. */
static void test_hook_before_backward_node(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096);
    int x = add_act(g, "x", 1024, true), y = add_act(g, "y", 1024, true);
    int loss = add_act(g, "loss", 4, true);
    int f1 = add_fwd(g, "f1", (int[]){x, w}, 2, y, (int[]){x}, 1, NULL);
    int f2 = add_fwd(g, "f2", (int[]){y}, 1, loss, (int[]){y}, 1, NULL);
    int copy = add_act(g, "x (from host)", 1024, false);
    int id;
    Op h = {.name = "unpack x", .kind = "h2d", .phase = PH_BWD, .fwd_op = -1, .hook = 4,
            .anchor = f1, .outputs = (int[]){copy}, .n_outputs = 1, .remap_of = (int[]){x},
            .layer = -1, .stream = STREAM_H2D};
    assert_int_equal(graph_add_op(g, &h, &id), VR_OK);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int u = -1;
    for (int i = id + 1; i < graph_num_ops(g); i++)
        if (strcmp(graph_op_c(g, i)->name, "unpack x") == 0) u = i;
    assert_true(u > backward_of(g, f2));
    assert_true(u < backward_of(g, f1));
    const Op *b1 = graph_op_c(g, backward_of(g, f1));
    assert_true(contains(b1->inputs, b1->n_inputs, copy));
    assert_true(contains(b1->frees, b1->n_frees, copy));
    assert_false(contains(b1->frees, b1->n_frees, x));

    Op bad = {.name = "bad", .kind = "none", .phase = PH_BWD, .fwd_op = -1, .hook = 4, .anchor = -1,
              .layer = -1};
    assert_int_equal(graph_add_op(g, &bad, &id), VR_EINVAL);
}

/* What a backward node launches: a GEMM's backward one GEMM per input that gets a gradient
 * (two with a trainable weight, one with a frozen one), a node whose gradients all pass
 * through (an add) no kernel at all, and an op's own bwd_kernels when it states them. */
static void test_backward_kernel_counts(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096), fw = add_frozen(g, "frozen", 4096);
    int x = add_act(g, "x", 4096, true);
    int y1 = add_act(g, "y1", 4096, true), y2 = add_act(g, "y2", 4096, true);
    int y3 = add_act(g, "y3", 4096, true), y4 = add_act(g, "y4", 4096, true);
    int loss = add_act(g, "loss", 4, true);
    int mm1 = add_fwd(g, "mm_trainable", (int[]){x, w}, 2, y1, (int[]){x, w}, 2, NULL);
    assert_int_equal(graph_op_set_kind(g, mm1, "mm"), VR_OK);
    int mm2 = add_fwd(g, "mm_frozen", (int[]){y1, fw}, 2, y2, (int[]){fw}, 1, NULL);
    assert_int_equal(graph_op_set_kind(g, mm2, "mm"), VR_OK);
    GradSpec pass[1] = {{.mode = GRAD_PASS, .pass_output = 0}};
    int add = add_fwd(g, "residual_add", (int[]){y2}, 1, y3, NULL, 0, pass);
    int norm = add_fwd(g, "group_norm", (int[]){y3}, 1, y4, (int[]){y3}, 1, NULL);
    graph_op(g, norm)->bwd_kernels = 4;
    add_fwd(g, "loss_fn", (int[]){y4}, 1, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    assert_int_equal(graph_op_c(g, backward_of(g, mm1))->kernels, 2);
    assert_int_equal(graph_op_c(g, backward_of(g, mm2))->kernels, 1);
    assert_string_equal(graph_op_c(g, backward_of(g, add))->kind, "none");
    assert_int_equal(graph_op_c(g, backward_of(g, norm))->kernels, 4);
}

/* A frozen parameter gets no gradient; an op whose inputs need no gradient gets no backward
 * node, and what it saved is released when backward() ends ("release graph"). */
static void test_frozen_branch_has_no_backward(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024), fz = add_frozen(g, "frozen", 1024);
    int a = add_act(g, "a", 1024, false); /* computed from the frozen weight only */
    int b = add_act(g, "b", 1024, true), loss = add_act(g, "loss", 4, true);
    int fa = add_fwd(g, "fa", (int[]){fz}, 1, a, (int[]){fz}, 1, NULL);
    int fb = add_fwd(g, "fb", (int[]){a, w}, 2, b, (int[]){a, w}, 2, NULL);
    add_fwd(g, "fl", (int[]){b}, 1, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    assert_int_equal(backward_of(g, fa), -1);
    assert_true(backward_of(g, fb) >= 0);
    assert_int_equal(graph_param_grad(g, fz), -1);
    assert_true(graph_param_grad(g, w) >= 0);
    /* fb's backward computes only w's gradient */
    assert_int_equal(graph_op_c(g, backward_of(g, fb))->n_outputs, 1);
    int rel = op_named(g, "release graph");
    assert_true(rel >= 0);
    const Op *r = graph_op_c(g, rel);
    assert_true(contains(r->frees, r->n_frees, fz));
}

/* torch.utils.checkpoint's frame and its early stop. Region 1 is {marker, f1, f2, f3}: the
 * marker names x0 as the checkpointed function's argument; f1 saves x0 and its output a stays
 * referenced (the frame's `a` local) until f3 releases it; f2 saves only its input a, so the
 * recomputation stops at f2 without running it. Expected: the recomputation runs f1, then a stop
 * op releases the recomputed a (the unwinding frames drop it); the frame's argument x0 goes in
 * the backward of f1, the region's earliest saving op, after the tensors f1 saved. */
static void test_checkpoint_frame_and_early_stop_unwind(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024);
    int x0 = add_act(g, "x0", 2048, true), a = add_act(g, "a", 4096, true);
    int b = add_act(g, "b", 4096, true), loss = add_act(g, "loss", 512, true);
    add_fwd(g, "f0", (int[]){w}, 1, x0, NULL, 0, NULL);
    Op marker = {.name = "checkpoint args", .kind = "none", .phase = PH_FWD, .fwd_op = -1,
                 .inputs = (int[]){x0}, .n_inputs = 1, .layer = -1, .region = 1, .ckpt_args = true};
    int mid = -1;
    assert_int_equal(graph_add_op(g, &marker, &mid), VR_OK);
    int f1 = add_fwd(g, "f1", (int[]){x0}, 1, a, (int[]){x0}, 1, NULL);
    int f2 = add_fwd(g, "f2", (int[]){a}, 1, b, (int[]){a}, 1, NULL);
    graph_op(g, f1)->n_frees = 0; /* a and x0 stay referenced past these ops */
    graph_op(g, f2)->n_frees = 0;
    Op f3 = {.name = "f3: a released", .kind = "none", .phase = PH_FWD, .fwd_op = -1,
             .frees = (int[]){a}, .n_frees = 1, .layer = -1, .region = 1};
    int f3id = -1;
    assert_int_equal(graph_add_op(g, &f3, &f3id), VR_OK);
    add_fwd(g, "f4", (int[]){b}, 1, loss, (int[]){b}, 1, NULL);
    graph_op(g, f1)->region = 1;
    graph_op(g, f2)->region = 1;
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);

    int rc[4], n_rc = 0;
    for (int i = 0; i < graph_num_ops(g); i++)
        if (graph_op_c(g, i)->phase == PH_RECOMPUTE && n_rc < 4) rc[n_rc++] = i;
    assert_int_equal(n_rc, 2);
    const Op *r1 = graph_op_c(g, rc[0]), *stop = graph_op_c(g, rc[1]);
    assert_int_equal(r1->fwd_op, f1);
    assert_non_null(strstr(stop->name, "stops"));
    assert_int_equal(stop->n_frees, 1);
    assert_int_equal(stop->frees[0], r1->outputs[0]); /* the recomputed a */
    /* f1's backward: its saved x0, then the frame's x0 */
    const Op *b1 = graph_op_c(g, backward_of(g, f1));
    int saved_at = -1, frame_at = -1;
    for (int k = 0; k < b1->n_frees; k++)
        if (b1->frees[k] == x0) {
            if (saved_at < 0) saved_at = k;
            else frame_at = k;
        }
    assert_true(saved_at >= 0 && frame_at > saved_at);
    (void)mid;
}

/* Non-reentrant checkpointing: f1 and f2 form region 1. Only the region's input x0 stays saved;
 * the first backward op of the region (f2's) is preceded by a recompute of the region up to its
 * last saved tensor (PyTorch's early stop): f2 saves only its input a, which autograd packs
 * before f2's kernel would run, so the recomputation stops there and f2 does not run again. */
static void test_checkpoint_region_recomputes(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024);
    int x0 = add_act(g, "x0", 2048, true), a = add_act(g, "a", 4096, true);
    int b = add_act(g, "b", 4096, true), loss = add_act(g, "loss", 512, true);
    int f0 = add_fwd(g, "f0", (int[]){w}, 1, x0, NULL, 0, NULL);
    int f1 = add_fwd(g, "f1", (int[]){x0}, 1, a, (int[]){x0}, 1, NULL);
    int f2 = add_fwd(g, "f2", (int[]){a}, 1, b, (int[]){a}, 1, NULL);
    int f3 = add_fwd(g, "f3", (int[]){b}, 1, loss, (int[]){b}, 1, NULL);
    graph_op(g, f1)->region = 1;
    graph_op(g, f2)->region = 1;
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);

    int rc = -1, n_rc = 0;
    for (int i = 0; i < graph_num_ops(g); i++)
        if (graph_op_c(g, i)->phase == PH_RECOMPUTE && graph_op_c(g, i)->fwd_op >= 0) {
            if (rc < 0) rc = i;
            n_rc++;
        }
    assert_int_equal(n_rc, 1); /* f1 only (f2 saves its input a, not its output); the stop that
                                  drops the recomputed a is no re-run */
    const Op *r = graph_op_c(g, rc);
    assert_int_equal(r->fwd_op, f1);
    assert_int_equal(r->n_inputs, 1);
    assert_int_equal(r->inputs[0], x0); /* the region input, kept from forward */
    assert_int_equal(r->n_outputs, 1);
    int a2 = r->outputs[0];
    assert_true(a2 != a);
    assert_int_equal(graph_tensor_c(g, a2)->bytes, 4096);
    assert_non_null(strstr(graph_tensor_c(g, a2)->name, "recomputed"));
    /* order: f3's backward, the recompute, then f2's and f1's backward */
    int b3 = backward_of(g, f3), b2 = backward_of(g, f2), b1 = backward_of(g, f1);
    assert_true(b3 < rc && rc < b2 && b2 < b1);
    /* f2's backward uses and releases the recomputed copy, never the forward's a */
    const Op *o2 = graph_op_c(g, b2);
    assert_true(contains(o2->inputs, o2->n_inputs, a2));
    assert_true(contains(o2->frees, o2->n_frees, a2));
    assert_false(contains(o2->inputs, o2->n_inputs, a));
    /* f1's backward uses the region input itself */
    const Op *o1 = graph_op_c(g, b1);
    assert_true(contains(o1->inputs, o1->n_inputs, x0));
    /* nothing in backward holds the forward's a: only f2's forward drops it */
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *o = graph_op_c(g, i);
        if (i != f2) assert_false(contains(o->frees, o->n_frees, a));
    }
    assert_true(backward_of(g, f0) > b1);
}

/* What derived ops carry over from their forward op (sim/op_fields.h's inherit column): the
 * recomputation of a checkpointed op and its backward node keep its stream (autograd runs a node
 * on its forward op's stream), collective world, layer and dtype; the recomputation its costs;
 * and every field the file marks inherited is the forward op's, byte for byte. */
static void test_derived_ops_inherit(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024);
    int x0 = add_act(g, "x0", 2048, true), a = add_act(g, "a", 4096, true);
    int b = add_act(g, "b", 4096, true), loss = add_act(g, "loss", 512, true);
    add_fwd(g, "f0", (int[]){w}, 1, x0, NULL, 0, NULL);
    int f1 = add_fwd(g, "f1", (int[]){x0}, 1, a, (int[]){a}, 1, NULL); /* saves its output */
    int f2 = add_fwd(g, "f2", (int[]){a}, 1, b, (int[]){a}, 1, NULL);
    add_fwd(g, "f3", (int[]){b}, 1, loss, (int[]){b}, 1, NULL);
    Op *o = graph_op(g, f1);
    o->region = 1;
    o->stream = STREAM_D2H;
    o->world = 4;
    o->layer = 7;
    o->compute_dtype = DT_BF16;
    o->kernels = 3;
    o->lora_rank = 8;
    o->lora_role = 'A';
    o->has_dispatch = true;
    o->dispatch_ns = 1500;
    o->rowwise_rows = 12;
    o->rowwise_row_bytes = 64;
    graph_op(g, f2)->region = 1;
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    int rc = -1;
    for (int i = 0; i < graph_num_ops(g); i++)
        if (graph_op_c(g, i)->phase == PH_RECOMPUTE && graph_op_c(g, i)->fwd_op == f1) rc = i;
    int bw = backward_of(g, f1);
    assert_true(rc >= 0 && bw >= 0);
    const Op *f = graph_op_c(g, f1), *r = graph_op_c(g, rc), *d = graph_op_c(g, bw);
    assert_int_equal(r->stream, STREAM_D2H);
    assert_int_equal(d->stream, STREAM_D2H);
    assert_int_equal(r->world, 4);
    assert_int_equal(d->world, 4);
    assert_int_equal(r->layer, 7);
    assert_int_equal(d->layer, 7);
    assert_int_equal(d->compute_dtype, DT_BF16);
    assert_int_equal(r->kernels, 3);
    assert_int_equal(d->lora_rank, 8);
    assert_true(r->rowwise_rows == 12 && r->rowwise_row_bytes == 64);
    assert_true(r->dispatch_ns == 1500);
#define OP_VAL(type, member, dim, key, read, def, inherit) \
    if ((inherit) & OPI_BWD) assert_memory_equal(&d->member, &f->member, sizeof f->member); \
    if ((inherit) & OPI_RECOMPUTE) assert_memory_equal(&r->member, &f->member, sizeof f->member);
#define OP_STR(member, key, read, inherit) \
    if ((inherit) & OPI_BWD) assert_string_equal(d->member, f->member); \
    if ((inherit) & OPI_RECOMPUTE) assert_string_equal(r->member, f->member);
#define OP_LIST(type, member, count, key, read, elem, inherit) \
    if ((inherit) & OPI_BWD) assert_int_equal(d->count, f->count); \
    if ((inherit) & OPI_RECOMPUTE) assert_int_equal(r->count, f->count);
#include "op_fields.h"
}

/* Op-level selective checkpointing: region 1 is f1, f2; the policy saves f1 (Op.sac_saved) and
 * the region recomputes to its end (full_recompute). The recomputation replays f1 from the
 * cache (a kind "none" op that drops the cache's reference, no new tensor) and re-runs f2 on
 * the forward's a, although f2 saves only its input (no early stop); f2's backward then uses and
 * releases the forward's a itself, which is therefore dropped by f2's forward, the replay and
 * f2's backward (and f2's re-run, whose frees are f2's). */
static void test_selective_checkpoint_replays_saved_op(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024);
    int x0 = add_act(g, "x0", 2048, true), a = add_act(g, "a", 4096, true);
    int b = add_act(g, "b", 4096, true), loss = add_act(g, "loss", 512, true);
    add_fwd(g, "f0", (int[]){w}, 1, x0, NULL, 0, NULL);
    int f1 = add_fwd(g, "f1", (int[]){x0}, 1, a, (int[]){x0}, 1, NULL);
    int f2 = add_fwd(g, "f2", (int[]){a}, 1, b, (int[]){a}, 1, NULL);
    int f3 = add_fwd(g, "f3", (int[]){b}, 1, loss, (int[]){b}, 1, NULL);
    graph_op(g, f1)->region = 1;
    graph_op(g, f2)->region = 1;
    graph_op(g, f1)->sac_saved = true;
    graph_op(g, f1)->full_recompute = true;
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);

    int replay = -1, rerun = -1;
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *o = graph_op_c(g, i);
        if (o->phase != PH_RECOMPUTE || o->fwd_op < 0) continue;
        if (o->fwd_op == f1) replay = i;
        if (o->fwd_op == f2) rerun = i;
    }
    assert_true(replay >= 0 && rerun > replay);
    const Op *rp = graph_op_c(g, replay);
    assert_string_equal(rp->kind, "none");
    assert_int_equal(rp->n_outputs, 0);
    assert_int_equal(rp->n_frees, 1);
    assert_int_equal(rp->frees[0], a); /* the cache lets go of the forward's a */
    const Op *rr = graph_op_c(g, rerun);
    assert_int_equal(rr->inputs[0], a); /* f2 re-runs on the cached a, not a recomputed copy */
    assert_true(rr->outputs[0] != b);
    /* f2's backward uses and releases the forward's a */
    const Op *o2 = graph_op_c(g, backward_of(g, f2));
    assert_true(contains(o2->inputs, o2->n_inputs, a));
    assert_true(contains(o2->frees, o2->n_frees, a));
    assert_true(backward_of(g, f3) < replay);
}

/* Gradient accumulation: one graph_derive_backward per micro-batch. The second call derives
 * only the forward ops declared since the first, and the parameter's gradient from the second
 * micro-batch is added in place into the .grad the first one made. */
static void test_grad_accumulation_two_microbatches(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 1024);
    int x1 = add_act(g, "x1", 2048, true), l1 = add_act(g, "loss1", 512, true);
    int f1a = add_fwd(g, "mb1.f1", (int[]){w}, 1, x1, NULL, 0, NULL);
    add_fwd(g, "mb1.f2", (int[]){x1}, 1, l1, (int[]){x1}, 1, NULL);
    assert_int_equal(graph_derive_backward(g, l1), VR_OK);
    int gw = graph_param_grad(g, w);
    assert_true(gw >= 0);
    assert_int_equal(graph_op_c(g, backward_of(g, f1a))->outputs[0], gw);
    int ops_after_first = graph_num_ops(g);

    int x2 = add_act(g, "x2", 2048, true), l2 = add_act(g, "loss2", 512, true);
    int f1b = add_fwd(g, "mb2.f1", (int[]){w}, 1, x2, NULL, 0, NULL);
    int f2b = add_fwd(g, "mb2.f2", (int[]){x2}, 1, l2, (int[]){x2}, 1, NULL);
    assert_int_equal(graph_derive_backward(g, l2), VR_OK);
    assert_int_equal(graph_param_grad(g, w), gw); /* the same .grad */
    /* the first micro-batch's ops are not derived again */
    int n_bwd_f1a = 0;
    for (int i = ops_after_first; i < graph_num_ops(g); i++) {
        const Op *o = graph_op_c(g, i);
        n_bwd_f1a += o->fwd_op == f1a && o->phase != PH_FWD;
    }
    assert_int_equal(n_bwd_f1a, 0);
    int b2 = backward_of(g, f2b), b1 = backward_of(g, f1b);
    assert_true(b2 > ops_after_first && b1 > b2);
    int gw2 = graph_op_c(g, b1)->outputs[0];
    assert_true(gw2 != gw);
    assert_false(graph_tensor_c(g, gw2)->persistent);
    int acc = -1;
    for (int i = b1 + 1; i < graph_num_ops(g); i++)
        if (strcmp(graph_op_c(g, i)->name, "AccumulateGrad(add_)") == 0) acc = i;
    assert_true(acc > b1);
    const Op *oa = graph_op_c(g, acc);
    assert_int_equal(oa->inputs[0], gw);
    assert_int_equal(oa->inputs[1], gw2);
    assert_int_equal(oa->n_frees, 1);
    assert_int_equal(oa->frees[0], gw2);
}

/* A view made without an op (reshape) hands its gradient to its base unchanged; an op with two
 * outputs of which only one gets a gradient (nll_loss's total_weight) takes that one alone. */
static void test_plain_view_and_two_outputs(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 4096);
    int a = add_act(g, "a", 4096, true);
    int fa = add_fwd(g, "fa", (int[]){w}, 1, a, NULL, 0, NULL);
    Tensor vt = {.name = "a.view", .bytes = 0, .base = a, .producer = -1, .module = -1,
                 .requires_grad = true, .cat = CAT_ACTIVATION};
    int v;
    assert_int_equal(graph_add_tensor(g, &vt, &v), VR_OK);
    int loss = add_act(g, "loss", 4, true), tw = add_act(g, "total_weight", 4, false);
    int outs[2] = {loss, tw}, ins[1] = {v}, saves[1] = {v};
    GradSpec gs[1] = {{.mode = GRAD_NEW, .grad_dtype = DT_FP32, .grad_bytes = 4096}};
    Op nll = {.name = "nll", .phase = PH_FWD, .inputs = ins, .n_inputs = 1, .outputs = outs,
              .n_outputs = 2, .saves = saves, .n_saves = 1, .frees = ins, .n_frees = 1,
              .grads = gs, .layer = -1};
    int fl;
    assert_int_equal(graph_add_op(g, &nll, &fl), VR_OK);
    assert_int_equal(graph_tensor_c(g, tw)->producer, fl);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    const Op *ol = graph_op_c(g, backward_of(g, fl));
    /* inputs: the loss's gradient (the seed) and the saved view; nothing for total_weight */
    assert_int_equal(ol->n_inputs, 2);
    assert_true(contains(ol->inputs, 2, v));
    assert_int_equal(ol->n_outputs, 1);
    assert_int_equal(graph_tensor_c(g, ol->outputs[0])->bytes, 4096);
    /* the view's gradient reaches a's producer: fa's backward consumes it */
    const Op *oa = graph_op_c(g, backward_of(g, fa));
    assert_true(contains(oa->inputs, oa->n_inputs, ol->outputs[0]));
    assert_true(graph_param_grad(g, w) >= 0);
    assert_int_equal(op_named(g, "InputBuffer"), -1);
    assert_int_equal(op_named(g, "release graph"), -1); /* nothing left pending */
}

/* graph_add_op copies every array it is given; grad_order decides the order in which the
 * backward op allocates the input gradients (MmBackward: the weight's first). */
static void test_op_arrays_copied_and_grad_order(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 8192);
    int x = add_act(g, "x", 1024, true), y = add_act(g, "y", 2048, true);
    int loss = add_act(g, "loss", 4, true);
    add_fwd(g, "make_x", (int[]){w}, 1, x, NULL, 0, NULL);
    int in[2] = {x, w}, out[1] = {y}, sv[2] = {x, w}, order[2] = {1, 0};
    GradSpec gs[2] = {{.mode = GRAD_NEW, .grad_dtype = DT_BF16, .view = true},
                      {.mode = GRAD_NEW, .grad_dtype = DT_FP32}};
    Op mm = {.name = "mm", .kind = "mm", .phase = PH_FWD, .inputs = in, .n_inputs = 2,
             .outputs = out, .n_outputs = 1, .saves = sv, .n_saves = 2, .frees = in,
             .n_frees = 2, .grads = gs, .grad_order = order, .n_grad_order = 2, .flops = 7,
             .layer = 3};
    int f;
    assert_int_equal(graph_add_op(g, &mm, &f), VR_OK);
    /* scribble over the caller's arrays: the graph kept its own copies */
    in[0] = in[1] = out[0] = sv[0] = sv[1] = order[0] = order[1] = -7;
    gs[0].mode = gs[1].mode = GRAD_NONE;
    const Op *o = graph_op_c(g, f);
    assert_int_equal(o->inputs[0], x);
    assert_int_equal(o->inputs[1], w);
    assert_int_equal(o->outputs[0], y);
    assert_int_equal(o->saves[1], w);
    assert_int_equal(o->grad_order[0], 1);
    assert_int_equal(o->grads[0].mode, GRAD_NEW);
    assert_string_equal(o->kind, "mm");
    add_fwd(g, "sum", (int[]){y}, 1, loss, NULL, 0, NULL);
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    const Op *b = graph_op_c(g, backward_of(g, f));
    assert_int_equal(b->n_outputs, 2);
    int gw = b->outputs[0], gx = b->outputs[1]; /* weight gradient allocated first */
    assert_int_equal(graph_tensor_c(g, gw)->bytes, 8192);
    assert_int_equal(graph_tensor_c(g, gw)->dtype, DT_FP32);
    assert_int_equal(graph_tensor_c(g, gx)->bytes, 1024);
    assert_int_equal(graph_tensor_c(g, gx)->dtype, DT_BF16);
    assert_true(graph_tensor_c(g, gx)->grad_view);
    assert_int_equal(b->layer, 3);
    assert_true(b->flops == 14.0);
    assert_string_equal(b->kind, "mm");
}

static void test_bad_indices_are_einval(void **state) {
    Graph *g = *state;
    int p = add_param(g, "w", 1024), y = add_act(g, "y", 1024, true);
    int bad_in[1] = {42}, outs[1] = {y}, ins[1] = {p};
    int id = -1;
    Op op = {.name = "badop", .phase = PH_FWD, .inputs = bad_in, .n_inputs = 1,
             .outputs = outs, .n_outputs = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "badop"));
    assert_non_null(strstr(graph_error(g), "42"));
    assert_int_equal(graph_num_ops(g), 0);

    int neg[1] = {-1};
    op = (Op){.name = "negout", .phase = PH_FWD, .inputs = ins, .n_inputs = 1, .outputs = neg,
              .n_outputs = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "negout"));
    assert_non_null(strstr(graph_error(g), "output"));

    op = (Op){.name = "badsave", .phase = PH_FWD, .inputs = ins, .n_inputs = 1,
              .outputs = outs, .n_outputs = 1, .saves = bad_in, .n_saves = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "saved"));

    op = (Op){.name = "badfree", .phase = PH_FWD, .inputs = ins, .n_inputs = 1,
              .outputs = outs, .n_outputs = 1, .frees = bad_in, .n_frees = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "freed"));

    int order[1] = {3};
    op = (Op){.name = "badorder", .phase = PH_FWD, .inputs = ins, .n_inputs = 1,
              .outputs = outs, .n_outputs = 1, .grad_order = order, .n_grad_order = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "badorder"));

    GradSpec pass[1] = {{.mode = GRAD_PASS, .pass_output = 5}};
    op = (Op){.name = "badpass", .phase = PH_FWD, .inputs = ins, .n_inputs = 1,
              .outputs = outs, .n_outputs = 1, .grads = pass};
    assert_int_equal(graph_add_op(g, &op, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "badpass"));
    assert_non_null(strstr(graph_error(g), "output"));
    assert_int_equal(graph_num_ops(g), 0);

    /* a view of a tensor that does not exist */
    Tensor v = {.name = "dangling", .base = 99, .producer = -1, .module = -1};
    assert_int_equal(graph_add_tensor(g, &v, &id), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "dangling"));
    assert_int_equal(graph_num_tensors(g), 2);

    /* a good op still goes in after the failures */
    op = (Op){.name = "good", .phase = PH_FWD, .inputs = ins, .n_inputs = 1, .outputs = outs,
              .n_outputs = 1};
    assert_int_equal(graph_add_op(g, &op, &id), VR_OK);
    assert_int_equal(id, 0);
}

static void test_loss_without_grad_is_einval(void **state) {
    Graph *g = *state;
    int fz = add_frozen(g, "frozen", 1024);
    int loss = add_act(g, "loss", 4, false);
    add_fwd(g, "fl", (int[]){fz}, 1, loss, NULL, 0, NULL);
    int n_ops = graph_num_ops(g);
    assert_int_equal(graph_derive_backward(g, loss), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "does not require grad"));
    assert_int_equal(graph_num_ops(g), n_ops); /* nothing appended */
    assert_int_equal(graph_derive_backward(g, -1), VR_EINVAL);
    assert_int_equal(graph_derive_backward(g, 12345), VR_EINVAL);
}

/* Views share storage; graph_storage_of follows the chain. */
static void test_views_and_names(void **state) {
    Graph *g = *state;
    int a = add_act(g, "a", 4096, true);
    Tensor v = {.name = "a.view", .bytes = 0, .base = a, .producer = -1, .module = -1};
    int va = -1, vv = -1;
    assert_int_equal(graph_add_tensor(g, &v, &va), VR_OK);
    v.base = va;
    v.name = "a.view.view";
    assert_int_equal(graph_add_tensor(g, &v, &vv), VR_OK);
    assert_int_equal(graph_storage_of(g, vv), a);
    assert_int_equal(graph_storage_of(g, a), a);
    assert_string_equal(graph_tensor_c(g, vv)->name, "a.view.view");
    DType d;
    assert_int_equal(dtype_parse("bfloat16", &d), VR_OK);
    assert_int_equal(d, DT_BF16);
    assert_int_equal(dtype_size(d), 2);
    assert_int_equal(dtype_parse("float128", &d), VR_EINVAL);
    assert_string_equal(category_name(CAT_OPTSTATE), "optimizer_state");
    graph_free(NULL); /* a no-op */
}

/* A chain of n ops over n + 1 activations, each op's flops its index, each tensor's bytes
 * 4096 + its index: large enough that the tables live in pages of their own (graph.c). */
static void build_chain(Graph *g, int n) {
    char name[32];
    int prev = add_act(g, "x0", 4096, true);
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "x%d", i + 1);
        int next = add_act(g, name, 4096 + (uint64_t)i + 1, true);
        snprintf(name, sizeof name, "op%d", i);
        int in[1] = {prev};
        int id = add_fwd(g, name, in, 1, next, NULL, 0, NULL);
        graph_op(g, id)->flops = i;
        prev = next;
    }
}

static void check_chain(const Graph *g, int n) {
    char name[32];
    assert_int_equal(graph_num_ops(g), n);
    assert_int_equal(graph_num_tensors(g), n + 1);
    for (int i = 0; i < n; i++) {
        const Op *op = graph_op_c(g, i);
        snprintf(name, sizeof name, "op%d", i);
        assert_string_equal(op->name, name);
        assert_true(op->flops == i);
        assert_int_equal(op->n_inputs, 1);
        assert_int_equal(op->inputs[0], i);
        assert_int_equal(op->outputs[0], i + 1);
        assert_int_equal(graph_tensor_c(g, i + 1)->bytes, 4096 + (uint64_t)i + 1);
    }
}

/* A freed graph's tables are kept for the next one (graph.c spare mappings): a smaller graph
 * made in them, and a larger one that grows out of them, read back what they were given. */
static void test_tables_reused_after_free(void **state) {
    (void)state;
    Graph *g = NULL;
    assert_int_equal(graph_new(&g), VR_OK);
    build_chain(g, 20000);
    check_chain(g, 20000);
    graph_free(g);
    assert_int_equal(graph_new(&g), VR_OK);
    build_chain(g, 3000);
    check_chain(g, 3000);
    graph_free(g);
    assert_int_equal(graph_new(&g), VR_OK);
    build_chain(g, 90000);
    check_chain(g, 90000);
    graph_free(g);
}

/* One decoder-like layer: x -> "layers.L.mul" (with the layer's weight w) -> h, then
 * "layers.L.add" h + shared -> out, at layer L; returns out, the first tensor made in *t0 and
 * the first op in *op0. */
static int toy_layer(Graph *g, int L, int x, int w, int shared, int *t0, int *op0) {
    char n1[64], n2[64], n3[64], n4[64];
    snprintf(n1, sizeof n1, "layers.%d.h", L);
    snprintf(n2, sizeof n2, "layers.%d.out", L);
    snprintf(n3, sizeof n3, "layers.%d.mul", L);
    snprintf(n4, sizeof n4, "release layer %d", L);
    *t0 = graph_num_tensors(g);
    *op0 = graph_num_ops(g);
    int h = add_act(g, n1, 400, true), out = add_act(g, n2, 400, true);
    int in1[2] = {x, w}, in2[2] = {h, shared};
    int a = add_fwd(g, n3, in1, 2, h, in1, 2, NULL);
    int b = add_fwd(g, n4, in2, 2, out, NULL, 0, NULL);
    graph_op(g, a)->layer = graph_op(g, b)->layer = L;
    graph_op(g, b)->region = L + 1;
    return out;
}

/* Layer 2 is layer 1 carried over (graph_is_replica): its names, layer, region, weight and input;
 * a copy made by graph_replicate for layer 3 equals layer 3 built op by op, and a layer whose
 * op differs in one field is not a replica. */
static void test_replicate_layer(void **state) {
    Graph *g = *state;
    int w[4], shared = add_frozen(g, "rotary", 64);
    for (int i = 0; i < 4; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layers.%d.w", i);
        w[i] = add_param(g, nm, 400);
    }
    int x0 = add_act(g, "x", 400, true);
    int t1, o1, t2, o2;
    int x1 = toy_layer(g, 1, x0, w[1], shared, &t1, &o1);
    int x2 = toy_layer(g, 2, x1, w[2], shared, &t2, &o2);
    int from12[2] = {w[1], x0}, to12[2] = {w[2], x1};
    LayerMap m = {.t_first = t1, .t_count = t2 - t1, .op_first = o1, .op_count = o2 - o1,
                  .from_layer = 1, .to_layer = 2, .region_delta = 1, .ext_from = from12,
                  .ext_to = to12, .n_ext = 2};
    assert_true(graph_is_replica(g, &m, t2, o2));
    m.region_delta = 0; /* layer 2's region is 3, not 2 */
    assert_false(graph_is_replica(g, &m, t2, o2));
    m.region_delta = 1;
    /* layer 3 carried over, and a layer 3 built by hand beside it */
    int to13[2] = {w[3], x2};
    LayerMap m3 = m;
    m3.to_layer = 3, m3.region_delta = 2, m3.ext_to = to13;
    int rt, ro;
    assert_int_equal(graph_replicate(g, &m3, &rt, &ro), VR_OK);
    assert_string_equal(graph_tensor_c(g, rt)->name, "layers.3.h");
    assert_string_equal(graph_op_c(g, ro + 1)->name, "release layer 3");
    assert_int_equal(graph_op_c(g, ro)->inputs[0], x2);
    assert_int_equal(graph_op_c(g, ro)->inputs[1], w[3]);
    assert_int_equal(graph_op_c(g, ro + 1)->inputs[1], shared);
    assert_int_equal(graph_op_c(g, ro)->layer, 3);
    assert_int_equal(graph_op_c(g, ro + 1)->region, 4);
    assert_int_equal(graph_tensor_c(g, rt)->producer, ro);
    int t3, o3;
    toy_layer(g, 3, x2, w[3], shared, &t3, &o3);
    LayerMap same = m3;
    same.ext_to = to13;
    assert_true(graph_is_replica(g, &same, t3, o3));
    graph_op(g, o3)->flops = 101; /* one field off */
    assert_false(graph_is_replica(g, &same, t3, o3));
}


/* A pipeline stage's op that makes tensor t from nothing (a received activation or gradient). */
static int add_recv(Graph *g, const char *name, int t, Phase ph) {
    int outs[1] = {t};
    Op op = {.name = name, .kind = "none", .phase = ph, .fwd_op = -1, .outputs = outs,
             .n_outputs = 1, .layer = -1};
    int id = -1;
    assert_int_equal(graph_add_op(g, &op, &id), VR_OK);
    return id;
}

/* One micro-batch of a middle pipeline stage: recv x -> f1(w) -> h -> f2 -> out. */
static void stage_forward(Graph *g, int w, int k, int *first, int *end, int *x, int *out) {
    char nx[16], nh[16], no[16];
    snprintf(nx, sizeof nx, "x%d", k);
    snprintf(nh, sizeof nh, "h%d", k);
    snprintf(no, sizeof no, "out%d", k);
    *x = add_act(g, nx, 512, true);
    int h = add_act(g, nh, 1024, true);
    *out = add_act(g, no, 512, true);
    *first = add_recv(g, "recv activation", *x, PH_FWD);
    add_fwd(g, "f1", (int[]){*x, w}, 2, h, (int[]){*x, w}, 2, NULL);
    add_fwd(g, "f2", (int[]){h}, 1, *out, (int[]){h}, 1, NULL);
    *end = graph_num_ops(g);
}

/* The 1F1B order of a stage that holds two micro-batches: F0 F1 B0 B1. Micro-batch 0's backward
 * is declared after micro-batch 1's forward, from the gradient received for out0: its nodes use
 * micro-batch 0's saved tensors, free its activations, hand back x0's gradient to be sent on, and
 * leave micro-batch 1's alone; micro-batch 1's backward accumulates into the same .grad. */
static void test_backward_of_one_micro_batch_later(void **state) {
    Graph *g = *state;
    int w = add_param(g, "w", 256);
    int first[2], end[2], x[2], out[2];
    stage_forward(g, w, 0, &first[0], &end[0], &x[0], &out[0]);
    stage_forward(g, w, 1, &first[1], &end[1], &x[1], &out[1]);
    int dy0 = add_act(g, "grad out0", 512, false);
    add_recv(g, "recv gradient 0", dy0, PH_BWD);
    int before = graph_num_ops(g);
    int dx0 = -1;
    BackwardOf b0 = {.first = first[0], .end = end[0], .output = out[0], .grad_out = dy0, .input = x[0]};
    assert_int_equal(graph_derive_backward_of(g, &b0, &dx0), VR_OK);
    /* the nodes of micro-batch 0's f2 and f1, in that order, after both forwards */
    int b_f2 = backward_of(g, first[0] + 2), b_f1 = backward_of(g, first[0] + 1);
    assert_true(b_f2 >= before && b_f1 > b_f2);
    assert_int_equal(backward_of(g, first[1] + 2), -1);
    assert_true(contains(graph_op_c(g, b_f2)->inputs, graph_op_c(g, b_f2)->n_inputs, dy0));
    /* x0's gradient is the caller's: made by f1's node, released by nothing derived */
    assert_true(dx0 >= 0);
    assert_int_equal(graph_tensor_c(g, dx0)->producer, b_f1);
    for (int i = before; i < graph_num_ops(g); i++)
        assert_false(contains(graph_op_c(g, i)->frees, graph_op_c(g, i)->n_frees, dx0));
    /* out0 is dropped as its gradient takes over; micro-batch 1's tensors are not touched */
    bool freed_out0 = false;
    for (int i = before; i < graph_num_ops(g); i++) {
        const Op *o = graph_op_c(g, i);
        freed_out0 |= contains(o->frees, o->n_frees, out[0]);
        assert_false(contains(o->frees, o->n_frees, out[1]) || contains(o->frees, o->n_frees, x[1]));
    }
    assert_true(freed_out0);
    int grad_w = graph_param_grad(g, w);
    assert_true(grad_w >= 0);

    int dy1 = add_act(g, "grad out1", 512, false);
    add_recv(g, "recv gradient 1", dy1, PH_BWD);
    int dx1 = -1;
    BackwardOf b1 = {.first = first[1], .end = end[1], .output = out[1], .grad_out = dy1, .input = x[1]};
    assert_int_equal(graph_derive_backward_of(g, &b1, &dx1), VR_OK);
    assert_true(dx1 >= 0 && dx1 != dx0);
    assert_int_equal(graph_param_grad(g, w), grad_w); /* accumulated into, not made again */
    assert_int_equal(backward_of(g, first[0] + 2), b_f2);  /* micro-batch 0 not derived twice */

    /* a range holding a derived op is refused */
    BackwardOf bad = {.first = first[0], .end = graph_num_ops(g), .output = out[0], .grad_out = -1, .input = -1};
    assert_int_equal(graph_derive_backward_of(g, &bad, &dx0), VR_EINVAL);
    assert_non_null(strstr(graph_error(g), "is not a forward op"));
}

/* A stage whose output is a residual sum, out = x + f1(x, w), derived from a received gradient
 * dy: the add hands dy to both x and h, and f1's node adds its gradient of x to x's pending dy.
 * Where nothing else holds dy, InputBuffer adds into it in place and dy is x's gradient; where
 * the caller holds it (Megatron's schedule keeps it in output_tensor_grad), use_count is above 1
 * and the sum is a new tensor. */
static int residual_stage_grad(bool held, int *dy_out, bool *in_place) {
    Graph *g = NULL;
    assert_int_equal(graph_new(&g), VR_OK);
    int w = add_param(g, "w", 256);
    int x = add_act(g, "x", 512, true), h = add_act(g, "h", 512, true), out = add_act(g, "out", 512, true);
    int first = add_recv(g, "recv activation", x, PH_FWD);
    add_fwd(g, "f1", (int[]){x, w}, 2, h, (int[]){x, w}, 2, NULL);
    GradSpec pass[2] = {{.mode = GRAD_PASS, .pass_output = 0}, {.mode = GRAD_PASS, .pass_output = 0}};
    int outs[1] = {out}, ins[2] = {x, h}, frees[1] = {h};
    Op add = {.name = "residual add", .kind = "elementwise", .phase = PH_FWD, .fwd_op = -1, .inputs = ins,
              .n_inputs = 2, .outputs = outs, .n_outputs = 1, .frees = frees, .n_frees = 1, .grads = pass,
              .layer = -1};
    int id;
    assert_int_equal(graph_add_op(g, &add, &id), VR_OK);
    int end = graph_num_ops(g);
    int dy = add_act(g, "grad out", 512, false);
    add_recv(g, "recv gradient", dy, PH_BWD);
    int dx = -1;
    BackwardOf b = {.first = first, .end = end, .output = out, .grad_out = dy, .input = x, .grad_out_held = held};
    assert_int_equal(graph_derive_backward_of(g, &b, &dx), VR_OK);
    *in_place = op_named(g, "InputBuffer::accumulate(add_)") >= 0;
    *dy_out = dy;
    graph_free(g);
    return dx;
}

static void test_backward_of_held_gradient_not_added_in_place(void **state) {
    (void)state;
    int dy;
    bool in_place;
    int dx = residual_stage_grad(false, &dy, &in_place);
    assert_true(in_place);
    assert_int_equal(dx, dy);
    dx = residual_stage_grad(true, &dy, &in_place);
    assert_false(in_place);
    assert_true(dx >= 0 && dx != dy);
}

/* ---- host allocation failure: fail the k-th allocation, every k ---- */

/* FailHook and fail_alloc: fail_hook.h */

/* A chain of `layers` forward ops over a weight each (enough tensors and ops to grow every
 * table past its first size), post-accumulate-grad hooks on two weights, then backward: every
 * call that allocates, each checked. */
static VrStatus build_hooked(Graph *g, int layers) {
    VrStatus st;
    int w[200], x[201];
    char name[32];
    GradSpec def[2] = {{.mode = GRAD_NEW, .grad_dtype = DT_FP32}, {.mode = GRAD_NEW, .grad_dtype = DT_FP32}};
    Tensor a = {.name = "x0", .bytes = 1024, .numel = 256, .dtype = DT_FP32, .cat = CAT_ACTIVATION,
                .base = -1, .producer = -1, .module = -1, .requires_grad = true};
    if ((st = graph_add_tensor(g, &a, &x[0]))) return st;
    for (int l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "w%d", l);
        Tensor p = {.name = name, .bytes = 2048, .numel = 512, .dtype = DT_FP32, .cat = CAT_PARAM,
                    .base = -1, .producer = -1, .module = -1, .requires_grad = true,
                    .is_param = true, .trainable = true, .persistent = true};
        if ((st = graph_add_tensor(g, &p, &w[l]))) return st;
        snprintf(name, sizeof name, "x%d", l + 1);
        a.name = name;
        if ((st = graph_add_tensor(g, &a, &x[l + 1]))) return st;
        int in[2] = {x[l], w[l]}, out[1] = {x[l + 1]};
        snprintf(name, sizeof name, "f%d", l);
        Op f = {.name = name, .kind = "mm", .phase = PH_FWD, .fwd_op = -1, .inputs = in,
                .n_inputs = 2, .outputs = out, .n_outputs = 1, .saves = in, .n_saves = 2,
                .frees = in, .n_frees = 1, .grads = def, .flops = 100, .layer = l};
        int id;
        if ((st = graph_add_op(g, &f, &id))) return st;
    }
    for (int k = 0; k < 2; k++) {
        Op h = {.name = "step", .kind = "elementwise", .phase = PH_BWD, .fwd_op = -1, .hook = 3,
                .grads_of = &w[k], .n_grads_of = 1, .free_grads = true, .drop_persistent = true,
                .layer = -1};
        int id;
        if ((st = graph_add_op(g, &h, &id))) return st;
    }
    return graph_derive_backward(g, x[layers]);
}

/* graph_new_hosted's graph takes every host allocation through its hook: failing the k-th for
 * every k, each call returns VR_ENOMEM (never a crash), the graph can still be freed (ASan's
 * leak checker, make test, shows nothing is lost), and with enough memory the graph is the one
 * graph_new makes. */
static void test_host_failure(void **state) {
    (void)state;
    enum { LAYERS = 100 };
    Graph *want;
    assert_int_equal(graph_new(&want), VR_OK);
    assert_int_equal(build_hooked(want, LAYERS), VR_OK);
    FailHook count = {0, LONG_MAX};
    Graph *g;
    assert_int_equal(graph_new_hosted(fail_alloc, &count, &g), VR_OK);
    assert_int_equal(build_hooked(g, LAYERS), VR_OK);
    graph_free(g);
    assert_true(count.n > 3); /* the tables, the arena and backward's maps went through it */
    for (long k = 0;; k++) {
        FailHook h = {0, k};
        g = NULL;
        VrStatus st = graph_new_hosted(fail_alloc, &h, &g);
        if (st == VR_OK) st = build_hooked(g, LAYERS);
        assert_true(st == VR_OK || st == VR_ENOMEM);
        if (st == VR_OK) {
            assert_int_equal(graph_num_ops(g), graph_num_ops(want));
            assert_int_equal(graph_num_tensors(g), graph_num_tensors(want));
        }
        graph_free(g);
        if (st == VR_OK && h.n <= k) break; /* fewer calls than k: every one was failed once */
        assert_true(k <= count.n);
    }
    graph_free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_failure),
        cmocka_unit_test_setup_teardown(test_linear_chain_reverse_order, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_saved_tensors_freed_by_backward, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_two_consumers_accumulate_in_place, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_two_consumers_accumulate_out_of_place_for_view, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_param_grad_is_stolen, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_param_used_twice_view_grad_sums_out_of_place, setup_graph,
                                        teardown_graph),
        cmocka_unit_test_setup_teardown(test_collective_backward_is_its_conjugate, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_grad_pass_allocates_nothing, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_grad_saved_handed_on, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_post_accumulate_grad_hook, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_hook_before_backward_node, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_backward_kernel_counts, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_frozen_branch_has_no_backward, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_checkpoint_region_recomputes, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_selective_checkpoint_replays_saved_op, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_checkpoint_frame_and_early_stop_unwind, setup_graph,
                                        teardown_graph),
        cmocka_unit_test_setup_teardown(test_grad_accumulation_two_microbatches, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_plain_view_and_two_outputs, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_op_arrays_copied_and_grad_order, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_bad_indices_are_einval, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_loss_without_grad_is_einval, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_views_and_names, setup_graph, teardown_graph),
        cmocka_unit_test(test_tables_reused_after_free),
        cmocka_unit_test_setup_teardown(test_replicate_layer, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_derived_ops_inherit, setup_graph, teardown_graph),
        cmocka_unit_test_setup_teardown(test_backward_of_one_micro_batch_later, setup_graph, teardown_graph),
        cmocka_unit_test(test_backward_of_held_gradient_not_added_in_place),
    };
    return cmocka_run_group_tests_name("graph", tests, NULL, NULL);
}
