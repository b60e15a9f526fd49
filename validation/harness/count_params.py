#!/usr/bin/env python3
"""Parameter counts of config.json files as transformers builds them (on the meta device, so no
memory is used): one JSON line per file, {"config", "architecture", "n_params"}.

Usage: count_params.py scenarios/configs/*.json
"""
import json
import sys

import torch
import transformers


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            hf = json.load(f)
        cls = getattr(transformers, hf["architectures"][0])
        cfg = cls.config_class(**{k: v for k, v in hf.items() if k != "architectures"})
        with torch.device("meta"):
            model = cls(cfg)
        n = sum(p.numel() for p in model.parameters())
        print(json.dumps({"config": path, "architecture": hf["architectures"][0], "n_params": n}), flush=True)


if __name__ == "__main__":
    main()
