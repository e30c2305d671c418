"""Where a decode step's time goes (scripts/profile-int4 runs it in the engine image): vLLM offline, the engine in
this process, one generate of BATCH prompts of 128 random tokens x 64 new tokens under torch.profiler; prints the
wall time per step and the ops by self CPU time."""

import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import torch
from vllm import LLM, SamplingParams

model, batch = sys.argv[1], int(sys.argv[2])
llm = LLM(model=model, dtype="bfloat16", max_model_len=256, max_num_seqs=max(batch, 1), seed=0)
g = torch.Generator().manual_seed(1)
prompts = [{"prompt_token_ids": torch.randint(10, 1900, (128,), generator=g).tolist()} for _ in range(batch)]
sp = SamplingParams(max_tokens=64, ignore_eos=True, temperature=0.0)
llm.generate(prompts, sp, use_tqdm=False)  # warm-up
t0 = time.perf_counter()
llm.generate(prompts, sp, use_tqdm=False)
wall = time.perf_counter() - t0
sp1 = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
t0 = time.perf_counter()
llm.generate(prompts, sp1, use_tqdm=False)
prefill = time.perf_counter() - t0
print(
    f"RESULT model={os.path.basename(model)} batch={batch} W4A8={os.environ.get('VLLM_CPU_INT4_W4A8', '1(default)')} "
    f"wall={wall:.3f}s prefill+1={prefill:.3f}s decode_step={(wall - prefill) / 63 * 1000:.2f}ms "
    f"tok/s={batch * 64 / wall:.1f}"
)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    llm.generate(prompts, sp, use_tqdm=False)
table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60)
print(table)
