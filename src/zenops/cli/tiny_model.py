"""`zenops tiny-model`: a tiny random-weight Llama model directory, made offline, for trying a real vLLM server."""

from __future__ import annotations

from pathlib import Path

import click

from zenops.cli.context import get_app
from zenops.cli.options import json_option


@click.command("tiny-model")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random weights.")
@click.option("--force", is_flag=True, help="Replace whatever OUT_DIR holds.")
@json_option
@click.pass_context
def tiny_model(ctx: click.Context, out_dir: Path, seed: int, force: bool) -> None:
    """Write a tiny random-weight Llama model (0.8 M parameters, bf16, SentencePiece tokenizer, chat template).

    \b
      zenops tiny-model ./tiny-llama
      vllm serve $PWD/tiny-llama --served-model-name tiny-llama --dtype bfloat16 --max-model-len 1024

    Made offline without torch (needs numpy and sentencepiece: pip install 'zenops[test]'). It answers gibberish:
    it is for checking that a server starts, streams and can be benchmarked. The same seed gives the same files;
    a model already made with the same settings is left as it is.
    """
    from zenops import tinymodel  # noqa: PLC0415

    app = get_app(ctx)
    model = tinymodel.generate(out_dir, seed=seed, force=force)
    if app.json:
        app.emit_json({"type": "result", "command": "tiny-model", "seed": seed, **model.to_dict()})
        return
    state = "written" if model.created else "already there, unchanged"
    app.out.print(f"{model.path} ({state})", markup=False, highlight=False)
    app.out.print(f"  parameters {model.parameters:,}", markup=False, highlight=False)
    app.out.print(f"  size       {model.size_bytes / 1e6:.1f} MB", markup=False, highlight=False)
