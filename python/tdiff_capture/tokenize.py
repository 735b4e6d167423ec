"""tdiff-capture tokenize: prompts as text -> the token file `tdiff case new --tokens` reads (one
prompt a line, token ids separated by spaces), with the release's own tokenizer.json through the
`tokenizers` package (a dependency of transformers). tdiff itself never tokenizes: a case holds
token ids, so the reference and the engine see the same ones whatever tokenizer produced them."""
from __future__ import annotations

import os
import sys

from .dump import InputError


def load_tokenizer(path):
    """The Tokenizer of tokenizer.json at `path` (a file or the folder holding it)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError("tokenize needs the `tokenizers` package (it comes with transformers; "
                         "pip install tokenizers)")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise InputError("%s: no tokenizer.json" % path)
    try:
        return Tokenizer.from_file(file)
    except Exception as e:  # noqa: BLE001 - the tokenizers package raises its own exception types
        raise InputError("%s: not a tokenizer the tokenizers package reads (%s)" % (file, str(e).splitlines()[0]))


def read_prompts(path):
    """The prompts, one a line ('\\n' written as backslash-n inside a line); empty lines skipped."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read the prompts (%s)" % (path, getattr(e, "strerror", None) or e))
    prompts = [line.replace("\\n", "\n") for line in text.splitlines() if line.strip()]
    if not prompts:
        raise InputError("%s: no prompt (one a line)" % path)
    return prompts


def run_tokenize(args):
    tokenizer = load_tokenizer(args.tokenizer)
    prompts = read_prompts(args.text)
    lines = []
    for n, prompt in enumerate(prompts, 1):
        ids = tokenizer.encode(prompt, add_special_tokens=not args.no_special_tokens).ids
        if not ids:
            raise InputError("%s: prompt %d gives no token" % (args.text, n))
        lines.append(" ".join(str(i) for i in ids))
    folder = os.path.dirname(os.path.abspath(args.output))
    tmp = os.path.join(folder, ".%s.tmp%d" % (os.path.basename(args.output), os.getpid()))
    try:
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, args.output)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError("%s: cannot write (%s)" % (args.output, e.strerror))
    lengths = [len(line.split()) for line in lines]
    print("# %d prompts, %d-%d tokens (vocabulary %d) -> %s; then: tdiff case new --model M --tokens %s --seed 1 -o case.h5"
          % (len(lines), min(lengths), max(lengths), tokenizer.get_vocab_size(), args.output, args.output))
    return 0
