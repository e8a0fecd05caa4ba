#!/usr/bin/env python3
"""Write the reference server's Hugging Face tokenizer files into the package:
`python scripts/make_hf_tokenizer.py [--check]`.

The files are rendered by `reference_server.hf_tokenizer_files` from ByteTokenizer's ids; run this
after changing either. --check writes nothing and exits 1 when a shipped file differs from the
rendering (tests/reference_server/test_hf_tokenizer.py makes the same check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_server.hf_tokenizer_files import hf_tokenizer_dir, render_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    directory = hf_tokenizer_dir()
    stale = []
    for name, text in render_files().items():
        path = directory / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            directory.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'differs' if args.check else 'wrote'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
