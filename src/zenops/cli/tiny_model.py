"""`zenops tiny-model`: a tiny random-weight Llama model directory, made offline, for trying a real vLLM server.

Library: zenops.tinymodel. Playbook: none.
"""

from __future__ import annotations

from pathlib import Path

import click

from zenops.cli.context import get_app
from zenops.cli.options import json_option


@click.command("tiny-model")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random weights.")
@click.option("--force", is_flag=True, help="Replace whatever OUT_DIR holds.")
@click.option(
    "--params",
    metavar="N",
    help="Size it to about N parameters (300M, 0.3B, 2e8; 5M-3B), e.g. to be memory-bandwidth bound on a CPU. "
    "Default: 0.8M.",
)
@click.option(
    "--quant",
    type=click.Choice(["gptq-int4", "w4a16", "w8a8"]),
    help="Quantize the linear layers: gptq-int4 (GPTQ 4-bit, symmetric, group 128), w4a16 (compressed-tensors "
    "pack-quantized int4, group 128), w8a8 (compressed-tensors int8 weights per channel, int8 dynamic activations). "
    "Embeddings, lm_head and norms stay bf16. The same seed and size: the same weights as the bf16 model.",
)
@json_option
@click.pass_context
def tiny_model(
    ctx: click.Context, out_dir: Path, seed: int, force: bool, params: str | None, quant: str | None
) -> None:
    """Write a tiny random-weight Llama model (0.8 M parameters, bf16, SentencePiece tokenizer, chat template).

    \b
      zenops tiny-model ./tiny-llama
      zenops tiny-model ./llama-200m --params 200M    a bigger one, for rooflines and benchmarks
      zenops tiny-model ./llama-200m-int4 --params 200M --quant w4a16   its int4 twin (same weights, quantized)
      vllm serve $PWD/tiny-llama --served-model-name tiny-llama --dtype bfloat16 --max-model-len 1024

    Made offline without torch (needs numpy and sentencepiece: pip install 'zenops[tiny]'). It answers gibberish:
    it is for checking that a server starts, streams and can be benchmarked. The same seed gives the same files;
    a model already made with the same settings is left as it is. With --params the shape (hidden size, layers,
    heads) is chosen for about N parameters (head dim 64, 4 query heads per KV head); 200M takes a few seconds.
    """
    from zenops import tinymodel  # noqa: PLC0415

    app = get_app(ctx)
    count = None if params is None else tinymodel.parse_params(params)
    model = tinymodel.generate(out_dir, seed=seed, force=force, params=count, quant=quant)
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "tiny-model",
                "seed": seed,
                "params_asked": count,
                "quant": quant,
                **model.to_dict(),
            }
        )
        return
    state = "written" if model.created else "already there, unchanged"
    app.out.print(f"{model.path} ({state})", markup=False, highlight=False)
    app.out.print(f"  parameters {model.parameters:,}", markup=False, highlight=False)
    app.out.print(f"  size       {model.size_bytes / 1e6:.1f} MB", markup=False, highlight=False)
