/* op_fields.h: the fields of an Op (graph.h), declared once.
 *
 * Each line is one field, with what every user of the record needs to know about it:
 *
 *   OP_VAL(type, member, dim, key, read, def, inherit)   a value (dim: empty, or [2] for a pair)
 *   OP_STR(member, key, read, inherit)                   a string in the graph's arena
 *   OP_LIST(type, member, count, key, read, elem, inherit) an arena array and its length, declared
 *                                                        here as `int count`
 *   OP_LISTX(type, member, count, key, read, elem, inherit) an arena array whose length is another
 *                                                        list's count (grads: one per input)
 *
 *   key      the field's name in the op table Lua gives G:op{...} (sim/bind/graph_ud.c)
 *   read     how G:op reads it: OPR_INT, OPR_NUM, OPR_BOOL (a generated read, `def` when absent),
 *            OPR_US (a number of microseconds, stored as ns), OPR_HAND (read by hand: a name to
 *            parse, a list, a default that depends on other fields), OPR_NO (not from Lua: the
 *            graph or a derivation sets it)
 *   elem     what a list holds: OPE_TENSORS (tensor ids, which graph_replicate maps to a layer's
 *            copies), OPE_INTS, OPE_BYTES, OPE_GRADS (GradSpec)
 *   inherit  which derived ops copy it from their forward op as it is (graph.c op_inherit):
 *            OPI_NONE, OPI_BWD (the backward node), OPI_RECOMPUTE (a checkpointed region's
 *            recomputation) or OPI_BOTH. A field the derivation works out itself (the backward's
 *            flops from bwd_flops) is OPI_NONE for it.
 *
 * From this list come the struct's fields (graph.h), G:op's field names and reader, the equality
 * graph_is_replica checks, the copy graph_add_op makes of every list, the mapping graph_replicate
 * gives the tensor lists, and what derived ops inherit. A new field is one line here, plus its
 * use. The file is included once per use, with the OP_* macros the user needs defined (the rest
 * expand to nothing); it undefines them all at its end. No include guard, on purpose.
 */
#ifndef OP_VAL
#define OP_VAL(type, member, dim, key, read, def, inherit)
#endif
#ifndef OP_STR
#define OP_STR(member, key, read, inherit)
#endif
#ifndef OP_LIST
#define OP_LIST(type, member, count, key, read, elem, inherit)
#endif
#ifndef OP_LISTX
#define OP_LISTX(type, member, count, key, read, elem, inherit)
#endif

/* ---- what the op is, what it allocates and frees, and how autograd derives its backward ---- */
/* name: arena copy */
OP_STR(name, "name", OPR_HAND, OPI_NONE)
/* kind: arena copy: "mm", "attention", "elementwise", "broadcast", ... (the cost model's GEMM
 * path or memory-access class) */
OP_STR(kind, "kind", OPR_HAND, OPI_RECOMPUTE)
/* kind_id: op_kind_of(kind), set by graph_add_op and graph_op_set_kind */
OP_VAL(OpKind, kind_id, , "", OPR_NO, 0, OPI_NONE)
/* bwd_kind: arena copy or NULL: the kind of the derived backward op, when it differs (a view
 * whose backward copies a strided gradient) */
OP_STR(bwd_kind, "bwd_kind", OPR_HAND, OPI_NONE)
OP_VAL(Phase, phase, , "phase", OPR_HAND, PH_FWD, OPI_NONE)
/* fwd_op: backward/recompute ops: the forward op they derive from, else -1 */
OP_VAL(int, fwd_op, , "", OPR_NO, -1, OPI_NONE)
OP_LIST(int, inputs, n_inputs, "inputs", OPR_HAND, OPE_TENSORS, OPI_NONE)
OP_LIST(int, outputs, n_outputs, "outputs", OPR_HAND, OPE_TENSORS, OPI_NONE)
/* saves: forward: tensors kept for backward */
OP_LIST(int, saves, n_saves, "saves", OPR_HAND, OPE_TENSORS, OPI_NONE)
/* frees: tensors whose reference this op drops when it ends (absent: a forward, build or
 * optimizer op frees its inputs) */
OP_LIST(int, frees, n_frees, "frees", OPR_HAND, OPE_TENSORS, OPI_NONE)
/* workspace: bytes; allocated after outputs, freed at end */
OP_LIST(uint64_t, workspace, n_workspace, "workspace", OPR_HAND, OPE_BYTES, OPI_RECOMPUTE)
/* grads: forward: one per input (NULL: no input gets a gradient) */
OP_LISTX(GradSpec, grads, n_inputs, "grads", OPR_HAND, OPE_GRADS, OPI_NONE)
/* grad_order: forward: order in which backward allocates input grads */
OP_LIST(int, grad_order, n_grad_order, "grad_order", OPR_HAND, OPE_INTS, OPI_NONE)
/* bwd_workspace: backward temporaries, bytes */
OP_LIST(uint64_t, bwd_workspace, n_bwd_workspace, "bwd_workspace", OPR_HAND, OPE_BYTES, OPI_NONE)
/* rowsum: (rows, columns) > 0: the op sums an m x c tensor over its rows, and ATen's staging
 * buffers for it (device.h device_row_sum_buffers) are further workspaces, worked out for the GPU
 * the op runs on */
OP_VAL(int64_t, rowsum, [2], "", OPR_NO, 0, OPI_RECOMPUTE)
/* bwd_rowsum: forward op: the same for its derived backward; Lua gives { rows, columns } */
OP_VAL(int64_t, bwd_rowsum, [2], "bwd_rowsum", OPR_HAND, 0, OPI_NONE)
/* workspace_first: allocate the workspaces before the outputs (a derivative formula, or a
 * forward function such as bitsandbytes' dequantize-then-F.linear, that computes its
 * temporaries first) */
OP_VAL(bool, workspace_first, , "workspace_first", OPR_BOOL, false, OPI_RECOMPUTE)
/* bwd_workspace_first: forward op: its derived backward has workspace_first */
OP_VAL(bool, bwd_workspace_first, , "bwd_workspace_first", OPR_BOOL, false, OPI_NONE)
/* bwd_workspace_at: forward op: where each of its backward's workspaces (bwd_workspace, in
 * order) is made among the input gradients (in grad order, 1-based), for a derivative formula
 * whose temporaries come and go between its gradients (BaddbmmBackward0: each gradient a bmm
 * result, then its alpha scaling; cuBLAS's contiguous copy of an operand inside a bmm): j > 0,
 * made just before gradient j and freed once it is made; -j, made just before gradient j and
 * freed before it is made (after every workspace placed at j is made); 0 or absent, as the
 * op's other workspaces */
OP_LIST(int, bwd_workspace_at, n_bwd_workspace_at, "bwd_workspace_at", OPR_HAND, OPE_INTS, OPI_NONE)
/* workspace_at: a backward op: its forward op's bwd_workspace_at, for its workspaces and outputs
 * (set by the derivation) */
OP_LIST(int, workspace_at, n_workspace_at, "", OPR_NO, OPE_INTS, OPI_NONE)
/* compute_dtype: dtype the math runs in (cost model); Lua's key "dtype" */
OP_VAL(DType, compute_dtype, , "dtype", OPR_HAND, DT_FP32, OPI_BOTH)
/* region: checkpointed region (> 0) whose saved tensors are recomputed in backward instead of
 * kept; 0 = none */
OP_VAL(int, region, , "region", OPR_INT, 0, OPI_NONE)
/* ckpt_args: a marker (kind "none") naming region's checkpointed function's arguments as its
 * inputs: torch.utils.checkpoint's frame holds them until the region's backward is done */
OP_VAL(bool, ckpt_args, , "ckpt_args", OPR_BOOL, false, OPI_NONE)
/* sac_saved: op-level selective checkpointing (torch.utils.checkpoint's
 * create_selective_checkpoint_contexts, MUST_SAVE): an op of its region whose outputs the caching
 * dispatch mode keeps from forward until the recomputation reaches it, which replays them instead
 * of running it (set by G:op_sac) */
OP_VAL(bool, sac_saved, , "", OPR_NO, false, OPI_NONE)
/* full_recompute: its region's recomputation runs to the region's end (torch.utils.checkpoint's
 * early_stop=False; a reentrant checkpoint that re-runs its whole function, Megatron's
 * CheckpointFunction, given on the region's ckpt_args marker) */
OP_VAL(bool, full_recompute, , "full_recompute", OPR_BOOL, false, OPI_NONE)
/* not_recomputed: an op of a torch.compile region whose outputs the partitioner's backward never
 * needs (neither saved nor recomputed): its region's recomputation skips it (set by
 * G:op_partition) */
OP_VAL(bool, not_recomputed, , "", OPR_NO, false, OPI_NONE)
/* compiled: 0, an op eager PyTorch dispatches; 1, an op of a torch.compile graph that launches
 * its own kernel (Inductor's generated code calls it: no eager dispatch, no checkpoint hooks);
 * 2, one whose work is part of another op's fused kernel (no launch, no kernel gap of its own).
 * Its backward and its recomputation are the compiled backward graph's: they inherit it (set by
 * G:op_partition) */
OP_VAL(int, compiled, , "", OPR_NO, 0, OPI_BOTH)
/* no_grad: forward op run under torch.no_grad(): outputs need no grad */
OP_VAL(bool, no_grad, , "no_grad", OPR_BOOL, false, OPI_NONE)

/* ---- what it costs (sim/cost.c) ---- */
/* flops: forward (or this op's) floating-point operations */
OP_VAL(double, flops, , "flops", OPR_NUM, 0, OPI_RECOMPUTE)
/* bytes_moved: bytes read and written by the kernel(s); Lua's key "bytes" */
OP_VAL(double, bytes_moved, , "bytes", OPR_NUM, 0, OPI_RECOMPUTE)
/* bwd_flops: backward flops (0 = 2 x flops) */
OP_VAL(double, bwd_flops, , "bwd_flops", OPR_NUM, 0, OPI_NONE)
/* bwd_bytes: backward bytes moved (0 = 2 x bytes_moved; < 0: none) */
OP_VAL(double, bwd_bytes, , "bwd_bytes", OPR_NUM, 0, OPI_NONE)
/* rate_at: a fused attention kernel's rate is read off its curve at flops x rate_at (0 or 1:
 * at its FLOPs): a kernel that launches a larger problem's grid and skips part of its work runs
 * at that problem's rate (FlexAttention over a document BlockMask: the causal grid, fewer blocks
 * per program). The forward and its recomputation; bwd_rate_at: the derived backward's */
OP_VAL(double, rate_at, , "rate_at", OPR_NUM, 0, OPI_RECOMPUTE)
OP_VAL(double, bwd_rate_at, , "bwd_rate_at", OPR_NUM, 0, OPI_NONE)
/* layout_bytes: bytes cuDNN's layout transforms around the op's kernel move (read and
 * written): [0] activations between NCHW and NHWC, [1] a filter between KCRS and KRSC; kernels
 * of their own, priced by the profile's classes "layout" and "layout_filter" (G:op_layout) */
OP_VAL(double, layout_bytes, [2], "", OPR_NO, 0, OPI_RECOMPUTE)
/* bwd_layout_bytes: forward op: the same for its derived backward */
OP_VAL(double, bwd_layout_bytes, [2], "", OPR_NO, 0, OPI_NONE)
/* rowwise_rows: a row-per-block statistics kernel beside the op's own (GroupNorm's
 * RowwiseMomentsCUDAKernel): its blocks, one per row... (G:op_rowwise) */
OP_VAL(double, rowwise_rows, , "", OPR_NO, 0, OPI_RECOMPUTE)
/* rowwise_row_bytes: ...and each row's bytes (bf16 elements x 2); priced by the profile's class
 * "rowwise" (sim/cost.c rowwise_ns); 0: none */
OP_VAL(double, rowwise_row_bytes, , "", OPR_NO, 0, OPI_RECOMPUTE)
/* in_ckpt: recompute or backward of a checkpointed region: torch.utils.checkpoint's
 * saved-tensor hooks make its host dispatch dearer */
OP_VAL(bool, in_ckpt, , "", OPR_NO, false, OPI_NONE)
/* kernels: kernel launches the op makes (a foreach op: one per tensor-list chunk; a derived GEMM
 * backward: one per input gradient); 0 = 1 */
OP_VAL(int, kernels, , "kernels", OPR_INT, 0, OPI_RECOMPUTE)
/* bwd_kernels: forward op: launches of its backward (0: derived as above) */
OP_VAL(int, bwd_kernels, , "bwd_kernels", OPR_INT, 0, OPI_NONE)
/* host_extra_ns: host CPU time the op costs beyond its dispatch and launches: the per-parameter
 * Python and C++ work of an optimizer step; Lua's key "host_us", in microseconds */
OP_VAL(double, host_extra_ns, , "host_us", OPR_US, 0, OPI_NONE)
/* device_ns: the op's device time as measured for it (a library's own kernel timed on this GPU:
 * lua/hw/calibrated/<gpu>_bnb_optim.lua), in place of the cost model's; 0: the cost model's.
 * Lua's key "device_us", in microseconds */
OP_VAL(double, device_ns, , "device_us", OPR_US, 0, OPI_NONE)
/* sync: the host waits for the device once it has issued the op (torch.cuda.synchronize(), as
 * bitsandbytes' optimizers call after each parameter's update) */
OP_VAL(bool, sync, , "sync", OPR_BOOL, false, OPI_NONE)
/* has_dispatch: the op's host dispatch was measured for its op class (a module call, a cast,
 * ...: lua/hw/calibrated/<gpu>_torch.lua host_class_us): dispatch_ns replaces the profile's one
 * figure per op, and its launches are inside it. Set when Lua gives dispatch_us. */
OP_VAL(bool, has_dispatch, , "", OPR_NO, false, OPI_BOTH)
/* dispatch_ns: has_dispatch: host time to issue the op (its launches included) */
OP_VAL(double, dispatch_ns, , "dispatch_us", OPR_US, -1, OPI_RECOMPUTE)
/* dispatch_ckpt_ns: has_dispatch: what torch.utils.checkpoint adds to it in a checkpointed
 * region (its saved-tensor hooks); a recomputation op has 0: its figure is the backward node's */
OP_VAL(double, dispatch_ckpt_ns, , "dispatch_ckpt_us", OPR_US, 0, OPI_NONE)
/* bwd_dispatch_ns: has_dispatch, forward op: the same of its derived backward node */
OP_VAL(double, bwd_dispatch_ns, , "bwd_dispatch_us", OPR_US, 0, OPI_NONE)
/* bwd_dispatch_ckpt_ns: and its checkpointed-region addition (the recomputation's hooks
 * included) */
OP_VAL(double, bwd_dispatch_ckpt_ns, , "bwd_dispatch_ckpt_us", OPR_US, 0, OPI_NONE)
/* gemms: GEMM kernels the op runs (a derived backward GEMM op: one per input that needs a
 * gradient); 0 = 1 */
OP_VAL(int, gemms, , "", OPR_NO, 0, OPI_RECOMPUTE)
/* lora_rank: > 0: a GEMM of a LoRA adapter of this rank (its backward too), of matrix lora_role
 * 'A' (x A^T, rank-wide output) or 'B' (a B^T, rank-deep product): priced by the profile's
 * adapter GEMM table where it has one (sim/cost.c lora_op_s) (G:op_lora). A checkpointed
 * region's recomputation does not inherit them: it is priced as a plain GEMM of its shape.
 * Pricing it from the adapter table instead raises the step time of vrsim validate's five
 * checkpointed LoRA records by 0.1 to 1.3 % (three nearer the measurement, two further), a
 * change of the cost model to be made on its own evidence. */
OP_VAL(int, lora_rank, , "", OPR_NO, 0, OPI_BWD)
OP_VAL(char, lora_role, , "", OPR_NO, 0, OPI_BWD)
/* gmm_experts: > 0: torch._grouped_mm over this many experts (a mixture of experts' GEMM,
 * lua/models/moe.lua): gmm_rows token-expert pairs, each through its expert's (gmm_k -> gmm_n)
 * matrix, the weights stored (E, k, n) when gmm_nn, else (E, n, k) and passed transposed;
 * gmm_grads: which gradients its backward makes (1 the input's, 2 the weight's, 3 both). Priced
 * from the GPU's measured grouped GEMM table where it has that shape (sim/cost.c grouped_s),
 * else as one GEMM of its FLOPs */
OP_VAL(int, gmm_experts, , "gmm_experts", OPR_INT, 0, OPI_BOTH)
OP_VAL(double, gmm_rows, , "gmm_rows", OPR_NUM, 0, OPI_BOTH)
OP_VAL(double, gmm_n, , "gmm_n", OPR_NUM, 0, OPI_BOTH)
OP_VAL(double, gmm_k, , "gmm_k", OPR_NUM, 0, OPI_BOTH)
OP_VAL(bool, gmm_nn, , "gmm_nn", OPR_BOOL, false, OPI_BOTH)
OP_VAL(int, gmm_grads, , "gmm_grads", OPR_INT, 0, OPI_BOTH)
/* moe_index: > 0: one of the experts dispatch's index ops (cost.h COST_MOE_*: sort, histc,
 * cumsum, index_put, row gather; a row gather's backward is IndexBackward0's zero fill and
 * sort-based accumulate), of moe_size (elements: the gather's rows x width, else its length),
 * moe_dup: a gather whose indices repeat (fewer source rows than rows). Priced from the GPU's
 * measured table where it has one, else by its kind's class */
OP_VAL(int, moe_index, , "moe_index", OPR_INT, 0, OPI_BOTH)
OP_VAL(double, moe_size, , "moe_size", OPR_NUM, 0, OPI_BOTH)
OP_VAL(bool, moe_dup, , "moe_dup", OPR_BOOL, false, OPI_BOTH)
/* world: collectives: ranks taking part */
OP_VAL(int, world, , "world", OPR_INT, 1, OPI_BOTH)
/* per_node: collectives: how many of the group's ranks one node holds, as the device mesh places
 * the group (lua/vrsim/mesh.lua M.groups); the group spans ceil(world / per_node) nodes and uses
 * that many of each node's NICs. 0: consecutive ranks, min(world, gpus_per_node) a node */
OP_VAL(int, per_node, , "per_node", OPR_INT, 0, OPI_BOTH)

/* ---- when and where it runs (sim/engine.c) ---- */
/* layer: decoder layer / block index, -1 if none (reports, hooks) */
OP_VAL(int, layer, , "layer", OPR_INT, -1, OPI_BOTH)
/* stream: 0 compute, 1 communication (NCCL), 2 host-to-device, 3 device-to-host, 4 a second
 * communication stream (FSDP2's reduce-scatter), 5 symmetric memory's (async tensor parallelism's peer
 * copies); allocations an op makes come from its stream's
 * pool, and autograd runs a backward node on its forward op's stream */
OP_VAL(int, stream, , "stream", OPR_INT, 0, OPI_BOTH)
/* wait_stream: > 0: the op starts no earlier than that stream (a communication or copy stream,
 * not the compute stream) is free: torch.cuda.current_stream().wait_stream(other) before it, as
 * symmetric memory's micro-pipelined collectives join their backend stream; 0: none */
OP_VAL(int, wait_stream, , "wait_stream", OPR_INT, 0, OPI_BOTH)
/* slot: > 0: the op's first output is held in this slot until the next op of the same slot
 * runs, which frees it just before allocating its own outputs, or just after with
 * slot_free_after (FSDP2 keeps each all-gather output and reduce-scatter input until the next
 * collective of its kind, instead of record_stream) */
OP_VAL(int, slot, , "slot", OPR_INT, 0, OPI_NONE)
OP_VAL(bool, slot_free_after, , "slot_free_after", OPR_BOOL, false, OPI_NONE)
/* hook: 0; 1: a copy of this op runs just before the backward of layer `layer`, 2: just after
 * it (ZeRO/FSDP gathers and reductions); 3: just after the last gradient of parameter
 * grads_of[0] in this backward is accumulated (a post-accumulate-grad hook: the optimizer step
 * in backward); 4: just before the backward node of forward op `anchor` runs, or, for a hook op
 * of a checkpointed region (region > 0), just before that region's recomputation (a saved
 * tensor brought back as backward unpacks it); 5: just before the backward of layer `layer` even
 * where its hook-1 ops were prefetched (FSDP2's all-gather copy-out: the prefetch issues the
 * all-gather, the layer's own pre-backward copies it out); 6: as backward ends, after the hook-2
 * ops of layer -1, in op order whatever their layer (FSDP2's root final callback: the
 * post-backward of a unit whose inputs needed no gradient, then the end of the last
 * reduce-scatter) */
OP_VAL(int, hook, , "hook", OPR_INT, 0, OPI_NONE)
/* anchor: hook 4 without a region: the forward op index it precedes, else -1; Lua's key
 * "before_op" */
OP_VAL(int, anchor, , "before_op", OPR_INT, -1, OPI_NONE)
/* grads_of: hook ops: parameters whose .grad are extra inputs */
OP_LIST(int, grads_of, n_grads_of, "grads_of", OPR_HAND, OPE_TENSORS, OPI_NONE)
/* free_grads: hook ops: drop those .grad tensors when the op ends */
OP_VAL(bool, free_grads, , "free_grads", OPR_BOOL, false, OPI_NONE)
/* remap_of: hook ops, one per output (or NULL): backward ops derived after this one use output
 * k wherever they saved tensor remap_of[k] (a parameter gathered again for backward, as
 * ZeRO-3/FSDP do) */
OP_LISTX(int, remap_of, n_outputs, "remap_of", OPR_HAND, OPE_TENSORS, OPI_NONE)
/* drop_persistent: frees of persistent tensors are honoured (param.grad = None) */
OP_VAL(bool, drop_persistent, , "drop_persistent", OPR_BOOL, false, OPI_NONE)
/* once: runs in the first step only (optimizer state creation) */
OP_VAL(bool, once, , "once", OPR_BOOL, false, OPI_NONE)
/* at_step: > 0: runs in that step only (DDP rebuilds its buckets in step 1); 0 = every step (or
 * the first, with once) */
OP_VAL(int, at_step, , "at_step", OPR_INT, 0, OPI_NONE)
/* from_step: > 0: runs in that step and every later one (DDP's rebuilt buckets) */
OP_VAL(int, from_step, , "from_step", OPR_INT, 0, OPI_NONE)
/* step_start: runs as its steps begin, before every other op, whatever its place in the graph
 * (DDP's bucket rebuild, declared once forward has shown the order gradients become ready) */
OP_VAL(bool, step_start, , "step_start", OPR_BOOL, false, OPI_NONE)

#undef OP_VAL
#undef OP_STR
#undef OP_LIST
#undef OP_LISTX
