"""The example campaign file `zenops campaign example` prints (a test loads it: it stays valid)."""

EXAMPLE = """\
---
# zenops campaign run sweep.yaml   (zenops campaign plan sweep.yaml first: the cells and the projected cost)
name: sweep                       # the campaign id is <name>-<yymmddHHMM>; its mark is on every cloud resource
cloud: sandbox                    # a clouds.yaml entry (new servers, torn down by the campaign) ...
flavors: [gp.5.24.96]             # ... one server per flavor, its cells one after another
# inventory: hosts.yml            # ... or your own hosts instead of cloud + flavors (nothing provisioned)
models:                           # catalogue ids or local model directories (relative to this file)
  - Qwen/Qwen3-4B
  - Qwen/Qwen3-4B-AWQ             # quantization is a property of the weights: int4 beside its bf16 twin
variants:                         # name -> `zenops up` options, or a preset: `variants: peers` (zenops's plan
  zen: {platform: zen}            #   against peers' vLLM settings), `variants: engines` (against llama.cpp's
  cpu: {platform: cpu}            #   server in bf16, q8_0, q4_k_m GGUF: a variant's `llamacpp: q8_0`)
engine:                           # shared by every cell: the image route, the vLLM/zentorch pair, engine args
  image_source: pip
bench:                            # per cell: every concurrency level, `repeats` times
  concurrency: [1, 4]
  input_len: 128
  output_len: 64
  prompts: 16
  repeats: 1
budget:
  max_usd: 5.00                   # refused before anything starts when projected over; stops cells when reached
  ttl: 2h                         # every server expires (zenops:expires_at): `zenops reap` removes it after
prices: {gp.5.24.96: 0.79}        # $/h per flavor, where the catalogue or zenops.yaml has none (or yours differ)
parallel: 1                       # flavors provisioned at the same time
"""
