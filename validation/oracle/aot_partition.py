"""torch.compile's partition of a training step, taken without Inductor's codegen (it needs a GPU):
AOTAutograd traces a function jointly with its backward, with Inductor's decompositions, and
torch._functorch.partitioners.min_cut_rematerialization_partition, the partition torch.compile's
default mode makes, splits it; the forward graph's outputs past the function's own are what it
saves for backward. The graphs are kept and run as traced (make_boxed_func), never lowered.

Two ways in:
- forward_graph: the function traced on its own (aot_function), the way capture_compile.py,
  check_compile_moe.py and check_nf4_partition.py take a decoder layer or a Linear; its first
  inputs static (an nn.Module's parameters as torch.compile marks them), saved_tensors reads
  what the forward graph saves;
- recording_backend: a dynamo backend (aot_autograd) with the same decompositions and partition,
  the way check_compile_bnb.py and check_compile_dpo.py compile each decoder layer of a model.

Each function takes torch or imports it when called, never at import: capture.py's fake CUDA
hooks must be preloaded before torch first loads."""

# the aten ops whose output shares its input's storage
VIEWS = ("aten.view.", "aten.permute.", "aten.alias.", "aten.t.", "aten._unsafe_view.",
         "aten.reshape.", "aten.expand.", "aten.unsqueeze.", "aten.squeeze.", "aten.slice.")


def view_root(torch, n):
    """The node whose storage a view node shares (itself when it is no view)."""
    while (n.op == "call_function" and str(n.target).startswith(VIEWS) and n.args
           and isinstance(n.args[0], torch.fx.Node)):
        n = n.args[0]
    return n


def forward_graph(f, args, n_static):
    """Runs f(*args) and the backward of its first output's sum through aot_function, Inductor's
    decompositions and the min-cut partitioner, the first n_static of the flattened inputs
    static-lifetime inputs (as torch.compile marks an nn.Module's parameters and buffers: the
    partitioner's treat_parameters_as_free_to_save, saving one costs nothing); returns the forward
    graph module. Under a FakeTensorMode when args are fake tensors: call it inside the mode."""
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table
    graphs = {}

    def fw(gm, _inputs):
        graphs["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw(gm, _inputs):
        return make_boxed_func(gm.forward)

    def partition(joint, joint_inputs, **kw):
        kw["static_lifetime_input_indices"] = list(range(n_static))
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)
    compiled = aot_function(f, fw_compiler=fw, bw_compiler=bw, partition_fn=partition,
                            decompositions=select_decomp_table())
    out = compiled(*args)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return graphs["fw"]


def saved_tensors(torch, gm, n_static, root=view_root):
    """What forward graph gm saves for backward, in its order: (node, value, base, kind) for each
    tensor output past the function's own first, base the node whose storage it is (root: through
    views by default), kind "param" where base is one of the first n_static inputs (aot_function
    flattens the arguments in order: the parameters first), "input" where it is another input,
    "activation" for the rest."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = set(placeholders[:n_static])
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    rows = []
    for n in outs[1:]:
        v = n.meta.get("val")
        if v is None or not hasattr(v, "shape"):
            continue
        base = root(torch, n)
        kind = "param" if base in static else "input" if base.op == "placeholder" else "activation"
        rows.append((n, v, base, kind))
    return rows


def recording_backend(record, inference=False):
    """A dynamo backend (torch.compile(backend=...)): AOTAutograd with Inductor's decompositions
    and the min-cut partitioner, each graph it makes handed to record(kind, gm), kind "forward",
    "backward" or, with inference, "inference" (a graph run with no gradient; without it such a
    graph goes to the forward compiler, aot_autograd's default), then run as traced."""
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    def compiler(kind):
        def compile_graph(gm, _inputs):
            record(kind, gm)
            return make_boxed_func(gm.forward)
        return compile_graph
    extra = {"inference_compiler": compiler("inference")} if inference else {}
    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        decompositions=select_decomp_table(),
                        partition_fn=min_cut_rematerialization_partition, **extra)
