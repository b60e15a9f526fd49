#!/bin/sh
# Decoder families from Hugging Face configs, and the passes applied to their module trees:
# parameter counts against transformers' own (validation/results/n_params_configs.jsonl, counted
# by count_params.py), LoRA injection by name, grouped-query attention, the sliding-window mask,
# sharding, and the errors for what is not modelled.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp scenarios/configs/*.json "$tmp/"

json() { "$VRSIM" "$@" --json --no-files 2>"$tmp/err"; }
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

scn() { # name config [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$2" },
  training = { micro_batch = 1, seq = 512, precision = "bf16", steps = 2, $3 } }
EOS
}

# 1. parameter counts: the simulated model's parameters, a tied weight once, as transformers counts
while read -r line; do
  cfg=$(echo "$line" | field 'd["config"].split("/")[-1]')
  want=$(echo "$line" | field 'd["n_params"]')
  scn count "$cfg"
  got=$(json "$tmp/count.lua" | field 'sum(v for k, v in d["parameters"].items() if k != "lora_adapters")')
  if [ "$got" = "$want" ]; then ok "$cfg: $got parameters, as transformers counts"
  else bad "$cfg: $got parameters, transformers counts $want"; fi
done < validation/results/n_params_configs.jsonl

# 2. tied embeddings: no lm_head parameter of its own
scn tied llama-3.2-1b.json
if json "$tmp/tied.lua" | field '"lm_head" not in d["parameters"]' | grep -q True; then
  ok "tie_word_embeddings: lm_head shares embed_tokens.weight"
else bad "tie_word_embeddings: lm_head has a weight of its own"; fi

# 3. LoRA by name: all-linear on Llama-3-8B is peft's 41,943,040 trainable parameters at r 16
scn lora llama-3-8b.json 'precision = "lora_bf16", build = "direct", lora = { r = 16, targets = "all-linear" }'
n=$(json "$tmp/lora.lua" --set model.layers=2 | field 'd["parameters"]["lora_adapters"]')
if [ "$n" = "2621440" ]; then ok "all-linear LoRA r16: 7 adapters a layer (1310720 parameters)"
else bad "all-linear LoRA r16 on 2 layers: $n adapter parameters, want 2621440"; fi
scn lora2 llama-3-8b.json 'precision = "lora_bf16", build = "direct", lora = { r = 16, targets = { "o_proj", "down_proj" } }'
n=$(json "$tmp/lora2.lua" --set model.layers=2 | field 'd["parameters"]["lora_adapters"]')
if [ "$n" = "2 * (16 * (4096 + 4096) + 16 * (14336 + 4096))" ] || [ "$n" = "851968" ]; then ok "LoRA on o_proj and down_proj by their peft names"
else bad "LoRA on o_proj and down_proj: $n adapter parameters, want 851968"; fi
scn lora3 llama-3-8b.json 'precision = "lora_bf16", lora = { targets = { "qproj" } }'
"$VRSIM" "$tmp/lora3.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "no Linear module named 'qproj'.*q_proj" "$tmp/err"; then ok "an unknown LoRA target exits 2 and lists the Linear names"
else bad "unknown LoRA target: exit $rc, $(cat "$tmp/err")"; fi

# 4. grouped-query attention: SDPA gets the grouped keys (no repeat_kv copies); eager repeats
scn gqa tinyllama-1.1b.json
"$VRSIM" "$tmp/gqa.lua" --no-files --set model.layers=1 --alloc-trace "$tmp/gqa.csv" >/dev/null 2>&1
"$VRSIM" "$tmp/gqa.lua" --no-files --set model.layers=1 --set attention=eager --alloc-trace "$tmp/gqa_e.csv" >/dev/null 2>&1
if ! grep -q repeat_k "$tmp/gqa.csv" && grep -q repeat_k "$tmp/gqa_e.csv"; then ok "GQA: enable_gqa under SDPA, repeat_kv under eager"
else bad "GQA: repeat_kv copies under SDPA or none under eager"; fi
"$VRSIM" "$tmp/gqa.lua" --no-files --set precision=fp32 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "math fallback" "$tmp/err"; then ok "GQA on SDPA's memory-efficient kernel (fp32) is an error, not a guess"
else bad "fp32 GQA: exit $rc"; fi

# 5. Mistral's sliding window: a mask only once the sequence is longer than the window
scn mis mistral-7b-v0.1.json
"$VRSIM" "$tmp/mis.lua" --no-files --set model.layers=1 --set seq=4096 --alloc-trace "$tmp/m1.csv" >/dev/null 2>&1
"$VRSIM" "$tmp/mis.lua" --no-files --set model.layers=1 --set seq=8192 --alloc-trace "$tmp/m2.csv" >/dev/null 2>&1
if ! grep -q sliding_window_mask "$tmp/m1.csv" && grep -q attn_mask_to_bias "$tmp/m2.csv"; then ok "sliding window: the causal shortcut up to the window, a saved additive mask past it"
else bad "sliding window mask"; fi

# 6. sharding passes: under FSDP2 and ZeRO-3 over 8 GPUs a rank holds its 1/8 shard (1.9 GiB of
# the 15.0 GiB of bf16 weights) plus what is gathered at the peak (the layer in backward; FSDP2's
# root group, embeddings and head, kept through backward): well under a third of the whole
scn fsdp llama-3-8b.json 'strategy = "fsdp2", checkpointing = true'
for s in fsdp2 zero3; do
  held=$(json "$tmp/fsdp.lua" --set strategy=$s --set hardware.count=8 --set model.config=llama-3-8b.json \
         | field 'round(d["breakdown_at_peak"]["parameters"])')
  if python3 -c "import sys; h=$held; sys.exit(0 if h < 0.3 * 16060522496 and h > 0 else 1)"; then
    ok "$s over 8 GPUs: $held parameter bytes at the peak (a shard and the gathered layers)"
  else bad "$s over 8 GPUs: $held parameter bytes at the peak"; fi
done

# 7. what is not modelled is an error, never silently wrong
cat > "$tmp/gpt2.json" <<'EOS'
{ "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12 }
EOS
scn gpt2 gpt2.json
"$VRSIM" "$tmp/gpt2.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "GPT2LMHeadModel' is not modelled (modelled: .*LlamaForCausalLM.*MixtralForCausalLM" "$tmp/err"; then
  ok "an architecture that is not modelled exits 2 and names the ones that are"
else bad "GPT2LMHeadModel: exit $rc, $(cat "$tmp/err")"; fi
python3 -c "
import json; d=json.load(open('$tmp/qwen2.5-0.5b.json')); d['use_sliding_window']=True
json.dump(d, open('$tmp/qwen_sw.json','w'))"
scn qsw qwen_sw.json
"$VRSIM" "$tmp/qsw.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "use_sliding_window" "$tmp/err"; then ok "Qwen2 use_sliding_window is an error"
else bad "Qwen2 use_sliding_window: exit $rc"; fi
python3 -c "
import json; d=json.load(open('$tmp/llama-3.2-1b.json')); d['attention_dropout']=0.1; d['some_new_key']=3
json.dump(d, open('$tmp/l_odd.json','w'))"
scn odd l_odd.json
"$VRSIM" "$tmp/odd.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "attention_dropout = 0.1 is not modelled" "$tmp/err"; then ok "attention_dropout > 0 is an error"
else bad "attention_dropout: exit $rc"; fi
python3 -c "
import json; d=json.load(open('$tmp/llama-3.2-1b.json')); d['some_new_key']=3
json.dump(d, open('$tmp/l_new.json','w'))"
scn newkey l_new.json
if "$VRSIM" "$tmp/newkey.lua" --no-files 2>&1 | grep -q "config key 'some_new_key' is not read by vrsim"; then ok "an unknown config key is a named warning"
else bad "unknown config key: no warning"; fi
scn arch mistral-7b-v0.1.json
"$VRSIM" "$tmp/arch.lua" --no-files --set model.arch=qwen2 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "model.arch = qwen2, but the config is a mistral model" "$tmp/err"; then ok "model.arch that contradicts the config exits 2"
else bad "arch mismatch: exit $rc, $(cat "$tmp/err")"; fi

# shape fields beside a config replace its keys as editing config.json would: hidden_size 2048
# without a head_dim in the config makes head_dim 2048 // 32 = 64 (LlamaConfig), so q, k, v and o
# are 2048 x 2048; vocab_size replaces the config's too
want=$(python3 -c "h, i, L, v = 2048, 11008, 32, 32000; print(2*v*h + L*(4*h*h + 3*h*i + 2*h) + h)")
got=$(json scenarios/llama7b_from_config.lua --set hidden=2048 | field 'd["n_params"]')
if [ "$got" = "$want" ]; then ok "model.hidden over a config: $got parameters, head_dim from the new hidden size"
else bad "model.hidden over a config: $got parameters, want $want (head_dim not recomputed?)"; fi
want=$(python3 -c "h, i, L, v = 4096, 11008, 32, 64000; print(2*v*h + L*(4*h*h + 3*h*i + 2*h) + h)")
got=$(json scenarios/llama7b_from_config.lua --set vocab=64000 | field 'd["n_params"]')
if [ "$got" = "$want" ]; then ok "model.vocab over a config: $got parameters"
else bad "model.vocab over a config: $got parameters, want $want (was the config's vocab, silently)"; fi
"$VRSIM" scenarios/llama7b_from_config.lua --set heads=16 --no-files >"$tmp/out" 2>&1
if [ $? -eq 2 ] && grep -q "num_attention_heads (16) must be a multiple of num_key_value_heads (32)" "$tmp/out"; then
  ok "model.heads that the config's key/value heads do not divide: exit 2, as transformers"
else bad "model.heads 16 over 32 key/value heads: $(head -2 "$tmp/out")"; fi
# a shape field that a model does not read is said so
"$VRSIM" scenarios/llama7b_from_config.lua --set size=13b --no-files >"$tmp/out" 2>&1
if grep -q "model.size = 13b has no effect on this run: model.config gives the shape" "$tmp/out"; then
  ok "model.size beside a config: noted as having no effect"
else bad "model.size beside a config: no note ($(grep notes "$tmp/out"))"; fi
"$VRSIM" scenarios/sdxl_train_3090.lua --set hidden=2048 --no-files >"$tmp/out" 2>&1
if grep -q "model.hidden = 2048 has no effect on this run: SDXL's shapes are its variant's" "$tmp/out"; then
  ok "model.hidden on SDXL: noted as having no effect"
else bad "model.hidden on SDXL: no note ($(grep notes "$tmp/out"))"; fi

# a model.config the arch does not read is refused, naming what differs (was: SD 1.5's UNet config
# with arch sdxl simulated SDXL, titled "sdxl-7b", without a word); tests/data/unet_configs holds
# diffusers' unet/config.json of SD 1.5 and of SDXL base as published
cp tests/data/unet_configs/*.json "$tmp/"
unet() { # name config arch
  size="seq = 128"; [ "$3" = sdxl ] && size="resolution = 256"
  printf 'return { hardware = { gpu = "h200" }, model = { arch = "%s", config = "%s" },\n  training = { %s, steps = 2 } }\n' "$3" "$2" "$size" >"$tmp/$1.lua"
  "$VRSIM" "$tmp/$1.lua" --no-files --json >"$tmp/$1.out" 2>&1
}
unet sd15 sd15_unet.json sdxl
if [ $? -eq 2 ] && grep -q "sd15_unet.json: arch sdxl builds SDXL base's UNet" "$tmp/sd15.out" \
   && grep -q "cross_attention_dim = 768 (SDXL base: 2048)" "$tmp/sd15.out"; then
  ok "SD 1.5's UNet config with arch sdxl: exit 2 naming cross_attention_dim 768 against 2048"
else bad "SD 1.5's UNet config with arch sdxl: $(head -c 300 "$tmp/sd15.out")"; fi
unet sdxl sdxl_base_unet.json sdxl
if [ $? -eq 0 ] && [ "$(field 'd["n_params"], d["model"]' <"$tmp/sdxl.out")" = "(2567463684, 'sdxl-base-unet')" ]; then
  ok "SDXL base's own UNet config with arch sdxl: read, 2,567,463,684 parameters, named sdxl-base-unet"
else bad "SDXL base's UNet config: $(head -c 300 "$tmp/sdxl.out")"; fi
sed 's/"sample_size": 128,/"sample_size": 128, "cross_attention_norm_num_groups": 32,/' "$tmp/sdxl_base_unet.json" >"$tmp/extra.json"
unet extra extra.json sdxl
if [ $? -eq 2 ] && grep -q "keys vrsim does not read: cross_attention_norm_num_groups" "$tmp/extra.out"; then
  ok "a UNet config key vrsim does not read: exit 2 naming it"
else bad "UNet config with an unread key: $(head -c 300 "$tmp/extra.out")"; fi
unet llsd llama-2-7b-hf.json sdxl
if [ $? -eq 2 ] && grep -q "this is a transformers LlamaForCausalLM config" "$tmp/llsd.out"; then
  ok "a Llama config with arch sdxl: exit 2"
else bad "a Llama config with arch sdxl: $(head -c 300 "$tmp/llsd.out")"; fi
unet unll sd15_unet.json llama
if [ $? -eq 2 ] && grep -q "a diffusers UNet2DConditionModel config is not a transformers model's" "$tmp/unll.out"; then
  ok "a UNet config with arch llama: exit 2"
else bad "a UNet config with arch llama: $(head -c 300 "$tmp/unll.out")"; fi
unet l2q qwen2.5-0.5b.json llama2
if [ $? -eq 0 ] && grep -q "model.arch = llama2 read as qwen2, the family of model.config (qwen2.5-0.5b.json)" "$tmp/l2q.out"; then
  ok "arch llama2 with a Qwen2 config: Qwen2 built, with a note saying so (was silently Qwen2)"
else bad "arch llama2 with a Qwen2 config: $(head -c 300 "$tmp/l2q.out")"; fi
unet m2q qwen2.5-0.5b.json mistral
if [ $? -eq 2 ] && grep -q "m2q.lua:1: model.arch = mistral, but the config is a qwen2 model" "$tmp/m2q.out"; then
  ok "arch mistral with a Qwen2 config: exit 2 with the scenario's line"
else bad "arch mistral with a Qwen2 config: $(head -c 300 "$tmp/m2q.out")"; fi
sed 's/LlamaForCausalLM/LlamaForSequenceClassification/' "$tmp/llama-2-7b-hf.json" >"$tmp/cls.json"
scn cls cls.json
json "$tmp/cls.lua" >/dev/null
if [ $? -eq 2 ] && grep -q "architecture 'LlamaForSequenceClassification' is not modelled" "$tmp/err"; then
  ok "architectures naming a class vrsim does not model, model_type llama: exit 2 (was a causal LM)"
else bad "LlamaForSequenceClassification: $(head -c 300 "$tmp/err")"; fi
"$VRSIM" scenarios/sdxl_breakdown.lua --set variant=sdxl-base-unet --set training.vae=bf16 --no-files >"$tmp/out" 2>&1
if grep -q "training.vae = bf16 has no effect on this run: the sdxl-base-unet variant runs the UNet alone" "$tmp/out"; then
  ok "training.vae on the UNet-alone variant: noted as having no effect"
else bad "training.vae on sdxl-base-unet: no note ($(grep notes "$tmp/out"))"; fi

echo "test_families: $pass passed, $fail failed"
[ $fail -eq 0 ]
