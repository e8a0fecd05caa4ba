#!/usr/bin/env python3
"""A tiny random Llama served by Hugging Face `transformers serve --continuous-batching`, on
loopback, as a foreign target for batchgate (no hub access needed).

    python scripts/transformers_target.py build DIR [--model tiny] [--seed 0]
    python scripts/transformers_target.py serve DIR [--port 8000] [--port-file F]

`build` writes DIR: our seeded random weights for the preset (`reference_server.model_config`,
the same model the bundled server runs), saved as a Hugging Face Llama checkpoint (config.json,
model.safetensors), and the bundled server's Hugging Face tokenizer files with their chat
template (`reference_server.hf_tokenizer_files`). config.json names no EOS token, so an answer
always runs to its max_tokens, as on the bundled server. `serve` runs `transformers serve` with
continuous batching (paged attention) on the CPU, bound to 127.0.0.1, the model loaded at start;
with --port 0 it picks a free port and writes it to --port-file. It needs the `transformers`
extra (`pip install -e ".[transformers]"`: transformers, accelerate, fastapi, uvicorn, openai).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["build", "main", "serve_argv"]


def build(directory: Path, *, model: str = "tiny", seed: int = 0) -> Path:
    import torch

    from reference_server.checkpoint import save_checkpoint
    from reference_server.hf_tokenizer_files import render_files
    from reference_server.model import build_random_model
    from reference_server.model_config import get_preset

    config = get_preset(model)
    weights = build_random_model(
        config, seed=seed, device=torch.device("cpu"), dtype=torch.float32, max_positions=None
    )
    save_checkpoint(weights, directory)
    for name, text in render_files().items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_argv(directory: Path, port: int, *, num_blocks: int = 4096) -> list[str]:
    exe = Path(sys.executable).with_name("transformers")
    return [
        str(exe) if exe.exists() else "transformers",
        "serve",
        "--continuous-batching",
        *("--device", "cpu", "--dtype", "float32"),
        # A KV pool the size of the bundled server's default (4096 blocks of 16 tokens) and a
        # context it uses: left to itself, the engine sizes its pool from the machine's memory
        # (14 GB resident on this 2-core VM, over a minute of warm-up).
        *("--cb-num-blocks", str(num_blocks), "--cb-block-size", "16"),
        *("--max-model-len", "4096"),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--log-level", "warning"),
        str(directory.resolve()),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the tiny random model and tokenizer into DIR")
    b.add_argument("directory", type=Path)
    b.add_argument("--model", default="tiny", help="model preset (default tiny)")
    b.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("serve", help="run `transformers serve --continuous-batching` on DIR")
    s.add_argument("directory", type=Path)
    s.add_argument("--port", type=int, default=8000, help="0 picks a free loopback port")
    s.add_argument("--port-file", type=Path, help="write the port here before serving")
    args = parser.parse_args(argv)
    if args.command == "build":
        args.directory.mkdir(parents=True, exist_ok=True)
        build(args.directory, model=args.model, seed=args.seed)
        print(f"transformers_target: wrote {args.directory}")
        return 0
    if not (args.directory / "config.json").is_file():
        print(f"transformers_target: {args.directory} has no config.json: run build first")
        return 2
    port = _free_port() if args.port == 0 else args.port
    if args.port_file is not None:
        args.port_file.write_text(str(port), encoding="utf-8")
    argv_ = serve_argv(args.directory, port)
    # No hub: everything is local, and a lookup would only hang on this machine.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    os.execvpe(argv_[0], argv_, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
