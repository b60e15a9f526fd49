"""profile_sdxl_step.py's lines as records `vrsim validate` reads: each profiled configuration
becomes a record of the truth's SDXL layout (validation/records/sdxl_h200.jsonl), its steps the
profile's CUDA-event step times and per-step peaks; a last entry holds the median of the steady
steps (1..), which is what validate compares. The build fields come from the truth record of
the same mode and checkpointing (the harness builds the same UNet the same way).

  python3 validation/harness/profile_records.py validation/results/profile_sdxl_batch_h200.jsonl \\
      validation/results/profile_sdxl_r64_h200.jsonl > validation/results/sdxl_plain_records_h200.jsonl
"""
import json
import statistics
import sys

TRUTH = "validation/records/sdxl_h200.jsonl"


def main():
    base = {json.loads(l)["name"]: json.loads(l) for l in open(TRUTH)}
    for path in sys.argv[1:]:
        for line in open(path):
            p = json.loads(line)
            if "steps_peak_alloc_reserved_mib" not in p:
                continue
            like = ("pub-r1024_amp" if p["mode"] == "amp_bf16" else
                    "pub-r1024_bf16_ckpt" if p["ckpt"] else "pub-r512_bf16")
            r = dict(base[like])
            r.update(name="plain-" + p["name"], res=p["res"], batch=p["batch"], ckpt=p["ckpt"],
                     mode=p["mode"], latent_hw=p["res"] // 8, n_params=p["n_params"])
            steps = [{"step": i, "wall_ms": ms, "gpu_ms": ms, "peak_alloc_mib": pa,
                      "peak_reserved_mib": pr}
                     for i, (ms, (pa, pr)) in enumerate(zip(p["steps_gpu_ms"],
                                                            p["steps_peak_alloc_reserved_mib"]))]
            med = statistics.median(p["steps_gpu_ms"][1:])
            steps.append(dict(steps[-1], step=len(steps), gpu_ms=med, wall_ms=med))
            r["steps"] = steps
            print(json.dumps(r))


if __name__ == "__main__":
    main()
