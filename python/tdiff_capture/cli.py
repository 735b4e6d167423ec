"""tdiff-capture capture | isolate | engine | tokenize | mapping, and the command line of
python/capture_hf.py."""
from __future__ import annotations

import argparse
import sys
import traceback

from .dump import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, CaptureError, InputError


def add_capture_options(p, legacy=False, engine=False):
    p.add_argument("--model", help="model folder in the HF layout (config.json + safetensors); "
                                    "default: the case's model_path attribute")
    if not engine:  # the engine's case and dump are the request's
        p.add_argument("--case", help="tdiff case file (reads /inputs/ids, /inputs/mask, "
                                      "/inputs/pos; isolate and replay also /reference)")
        p.add_argument("-o", "--output", help="HDF5 dump to write (replaced atomically); with --cases-from, the "
                                              "folder that gets <name>.h5 for every case")
    p.add_argument("--stages", default="", help="stage pattern, tdiff's syntax: fnmatch globs separated by "
                                               "commas, e.g. 'L0[1-2].attn.*,lm_head' (default: all)")
    p.add_argument("--dtype", default="float64" if legacy else "bfloat16",
                   help="the model's dtype: float64, float32, bfloat16, float16 (default %(default)s)")
    p.add_argument("--device", default="cpu" if legacy else "cuda",
                   help="torch device: cpu, cuda, cuda:1, ... (default %(default)s)")
    p.add_argument("--store", choices=("native", "f64"), default="f64" if legacy else "native",
                   help="native: every tensor in the dtype the model held (bf16 as bit patterns); f64: floats "
                        "widened exactly to float64 (default %(default)s)")
    p.add_argument("--rope-f64", action="store_true",
                   help="compute the RoPE tables in float64 (a deliberate deviation from stock transformers, "
                        "for the oracle: its float32 tables drift with position)")
    p.add_argument("--experts", choices=("eager", "default"), default=None,
                   help="experts implementation (default: eager for float64, which needs it; else transformers')")
    p.add_argument("--attn", default="eager",
                   help="attn_implementation (default eager: attn.q_rope, kv_rope and core need it)")
    p.add_argument("--no-derived", action="store_true",
                   help="skip the tensors recomputed from captured ones (mix, sinkhorn/pre, preh, "
                        "router/score, idx.weights, idx.score)")
    p.add_argument("--no-attn-wrap", action="store_true",
                   help="do not wrap eager_attention_forward (then attn.q_rope, attn.kv_rope and "
                        "attn.core are not captured)")
    p.add_argument("--hidden-states-check", action="store_true",
                   help="also run with output_hidden_states=True and check that its entries equal "
                        "the hooked layer outputs bitwise (model-spec §5.11b); exit 1 when not (capture only)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--fault", action="append", metavar="MODULE=DTYPE",
                   help="plant a fault: MODULE (a name in model.named_modules(), e.g. "
                        "model.layers.1.self_attn.o_b_proj) computes in DTYPE (float16, bfloat16, float32), "
                        "its output cast back; repeatable. For trying what tdiff names")
    if not legacy and not engine:
        p.add_argument("--cases-from", metavar="LIST",
                       help="every case of a list instead of --case, the model loaded once: the lines of "
                            "`tdiff ci SET --prepare` (name, case file, model folder; '-': standard input)")
    if not legacy:
        p.add_argument("--allow-left-padding", action="store_true",
                       help="capture a left-padded case anyway (a candidate, not the oracle: transformers' "
                            "left-padded rows differ from the model, model-spec §5.12, and the report shows by how much)")


def _guarded(fn):
    try:
        return fn()
    except InputError as e:
        print("error: %s" % e, file=sys.stderr)
        return EXIT_INPUT
    except CaptureError as e:
        print("internal error: %s" % e, file=sys.stderr)
        return EXIT_INTERNAL
    except Exception:  # noqa: BLE001 - transformers/torch failures: exit 3 with the traceback
        traceback.print_exc()
        return EXIT_INTERNAL


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="tdiff-capture",
        description="Hook transformers' DeepseekV4ForCausalLM on a tdiff case and write a candidate dump "
                    "under tdiff's stage names (`tdiff run CASE --candidate-dump DUMP` judges it).",
        epilog="examples:\n"
               "  tdiff-capture capture --model M --case c.h5 -o run.h5                 # bf16 on the GPU\n"
               "  tdiff-capture isolate --model M --case c.h5 -o iso.h5                 # each stage on the reference's inputs\n"
               "  tdiff-capture capture --model M --case c.h5 -o rep.h5 --selections replay  # the reference's choices\n"
               "  tdiff bisect c.h5 --candidate-cmd 'tdiff-capture engine --model M'   # bisect transformers\n"
               "  tdiff-capture tokenize --tokenizer CKPT prompts.txt -o tokens.txt     # text -> token ids\n"
               "  tdiff ci cases/tiny --prepare | tdiff-capture capture --cases-from - -o dumps/ --allow-left-padding\n"
               "  tdiff-capture capture --model M --case c.h5 -o hf.h5 --dtype float64 --device cpu --store f64 --rope-f64\n"
               "  tdiff-capture mapping                                                  # the module -> stage table",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    for name, help_ in (("capture", "the model's own forward: every stage it reaches (dump mode run; with "
                                    "--selections replay, mode replay)"),
                        ("isolate", "every stage on the reference's inputs from the case (dump mode isolated)")):
        add_capture_options(sub.add_parser(name, help=help_, description=help_))
    sub.choices["capture"].add_argument(
        "--selections", choices=("free", "replay"), default="free",
        help="free: the model's own expert and indexer choices (default); replay: after each router and "
             "indexer the case's reference's choice is taken (the routing weights from the model's own "
             "scores at it) and the model's own recorded (dump mode replay)")
    engine = sub.add_parser("engine", help="run as tdiff's engine: `tdiff bisect|determinism|run|ci CASE "
                                           "--candidate-cmd 'tdiff-capture engine ...'` (reads $TDIFF_REQUEST)",
                            description="One run that tdiff asked for (docs/reference/engine-protocol.md): the "
                                        "request names the case, the dump, its mode and the stages taken from "
                                        "the case's reference.")
    add_capture_options(engine, engine=True)
    engine.add_argument("--request", help="the request file (default: $TDIFF_REQUEST)")
    add_tokenize_parser(sub)
    sub.add_parser("mapping", help="print the module -> stage table (markdown; no torch needed)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.cmd is None:
        p.print_help()
        return EXIT_INPUT
    if args.cmd == "mapping":
        from .mapping import print_mapping
        print_mapping()
        return EXIT_OK
    if args.cmd == "tokenize":
        from .tokenize import run_tokenize
        return _guarded(lambda: run_tokenize(args))
    from .capture import run
    if args.cmd == "engine":
        return _guarded(lambda: _engine(args))
    sub_parser = sub.choices[args.cmd]
    if not args.output or bool(args.case) == bool(args.cases_from):
        sub_parser.error("give -o and one of --case and --cases-from")
    mode = "isolated" if args.cmd == "isolate" else ("replay" if args.selections == "replay" else "run")
    return _guarded(lambda: run(args, mode=mode))


def _engine(args):
    from .capture import run
    from .protocol import read_request
    request = read_request(args.request)
    args.case, args.output, args.cases_from = request.case, request.dump, None
    return run(args, request=request, written_by="tdiff-capture engine")


def add_tokenize_parser(sub):
    t = sub.add_parser("tokenize", help="token ids from text with a release's tokenizer (`tdiff case new --tokens`)",
                       description="Text to token ids with the release's own tokenizer (tokenizer.json, through "
                                   "the `tokenizers` package): one prompt a line in, one line of ids separated "
                                   "by spaces out, as `tdiff case new --tokens` reads them.")
    t.add_argument("--tokenizer", required=True, help="tokenizer.json, or the checkpoint folder that holds it")
    t.add_argument("text", help="text file, one prompt a line ('-': standard input); \\n in a line is a newline")
    t.add_argument("-o", "--output", required=True, help="token file to write (replaced atomically)")
    t.add_argument("--no-special-tokens", action="store_true",
                   help="leave out what the tokenizer's post-processor adds (the BOS)")


def legacy_main(argv=None):
    """python/capture_hf.py's command line, unchanged: float64 on the CPU, floats stored as float64."""
    p = argparse.ArgumentParser(
        prog="capture_hf.py",
        description="Run transformers' DeepseekV4ForCausalLM (float64, CPU, eager) on a tdiff case "
                    "and write its stage outputs under tdiff's names (/<stage>/<tensor>). A wrapper of "
                    "the tdiff_capture package (python/README.md); --isolate: each stage on the "
                    "reference's inputs.",
        epilog="example: python3 python/capture_hf.py --model /tmp/tiny --case /tmp/tiny.h5 -o /tmp/hf.h5\n"
               "then:    tdiff compare /tmp/tiny.h5 /tmp/hf.h5 --group-a /reference --group-b /",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_capture_options(p, legacy=True)
    p.add_argument("--isolate", action="store_true", help="as `tdiff-capture isolate`")
    p.add_argument("--print-mapping", action="store_true",
                   help="print the module -> stage table (markdown) and exit")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.print_mapping:
        from .mapping import print_mapping
        print_mapping()
        return EXIT_OK
    if not args.case or not args.output:
        p.error("--case and -o are required")
    from .capture import run
    return _guarded(lambda: run(args, mode="isolated" if args.isolate else "run", written_by="python/capture_hf.py"))


if __name__ == "__main__":
    sys.exit(main())
