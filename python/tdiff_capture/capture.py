"""capture, replay, isolate and engine: run transformers' DeepseekV4ForCausalLM on a case's tokens
and mask and write its stage tensors as a tdiff candidate dump (see README.md)."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from .dump import (AtomicH5, InputError, check_right_padding, inputs_sha256, read_case, read_reference,
                   set_dump_attrs)
from .mapping import (CONVENTIONS, EXTRA_TENSORS, ISOLATION, MAPPING, expected_shapes, pattern_matches,
                      stage_class, stage_graph)

DTYPES = {"float64": "float64", "f64": "float64", "float32": "float32", "f32": "float32",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "f16": "float16"}


def read_checked_case(path, allow_left_padding):
    """A case's ids, mask, pos and root attributes, checked for transformers (padding, pos)."""
    ids, mask, pos, case_attrs, _ = read_case(path)
    check_right_padding(mask, path, allow_left_padding)
    B, S = ids.shape
    if not np.array_equal(pos, np.broadcast_to(np.arange(S), (B, S))):
        print("warning: %s: /inputs/pos is not 0..S-1 in every row; passing it as position_ids as is"
              % path, file=sys.stderr)
    return ids, mask, pos, case_attrs


def read_case_list(path):
    """`tdiff ci SET --prepare`'s output (name, case file, model folder; tab-separated, one case a
    line; "-": standard input) as [(name, case, model)], or InputError naming the line."""
    text = sys.stdin.read() if path == "-" else None
    if text is None:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise InputError("--cases-from %s: %s" % (path, e.strerror))
    cases, names = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not all(parts):
            raise InputError("%s:%d: not 'name<TAB>case file<TAB>model folder' (tdiff ci SET --prepare writes it)"
                             % (path, n))
        if parts[0] in names or "/" in parts[0] or parts[0] in (".", ".."):
            raise InputError("%s:%d: case name '%s' %s" % (path, n, parts[0], "used twice" if parts[0] in names
                                                            else "is not a file name"))
        names.add(parts[0])
        cases.append(tuple(parts))
    if not cases:
        raise InputError("--cases-from %s: no case listed" % path)
    return cases


NEEDS_REFERENCE = {"replay": "replay feeds the reference's expert and indexer choices to the model",
                   "isolated": "isolate feeds the reference's tensors to the model"}


def run(args, mode="run", written_by="tdiff-capture", request=None):
    """args: model, case, output, stages, no_derived, no_attn_wrap, hidden_states_check, threads,
    dtype, device, store, rope_f64, experts, attn, allow_left_padding, cases_from, fault. mode:
    the dump's mode (run, replay, isolated). One case into args.output; with cases_from, every
    case listed into args.output/<name>.h5, each model folder loaded once (a set's cases may
    run on several models; --model: that one for all); with request (protocol.Request), its
    case into its dump in its mode, its stages substituted. Returns the exit code (0 or 1)."""
    t_start = time.perf_counter()
    allow_left = getattr(args, "allow_left_padding", False)
    substitute = None
    if request is not None:
        jobs, mode = [(request.case, request.dump, None)], request.mode
        substitute = request.substituted if request.substitute else None
    elif getattr(args, "cases_from", None):
        jobs = [(case, os.path.join(args.output, name + ".h5"), model)
                for name, case, model in read_case_list(args.cases_from)]
    else:
        jobs = [(args.case, args.output, None)]
    cases = [read_checked_case(case, allow_left) for case, _, _ in jobs]  # every case's inputs, before a model loads
    jobs = [(case, out, args.model or model or attrs.get("model_path"))
            for (case, out, model), (_, _, _, attrs) in zip(jobs, cases)]
    vocab = {}
    for _, _, model_dir in jobs:
        if not model_dir:
            raise InputError("no --model given and the case has no model_path attribute")
        if model_dir not in vocab:
            vocab[model_dir] = model_vocab(model_dir)
    if args.dtype not in DTYPES:
        raise InputError("--dtype %s: not one of %s" % (args.dtype, ", ".join(sorted(DTYPES))))
    if mode != "run" and args.hidden_states_check:
        raise InputError("--hidden-states-check checks a normal forward; %s replaces what the layers compute" % mode)
    if mode != "run" or substitute is not None:
        for case, _, _ in jobs:  # each has its /reference, before the model loads
            read_reference(case, NEEDS_REFERENCE.get(mode, "the request substitutes the reference's tensors"),
                           every_stage=mode == "isolated" or substitute is not None).close()
    for (case, _, model_dir), (ids, _, _, _) in zip(jobs, cases):  # every case, before any dump is written
        if ids.min() < 0 or ids.max() >= vocab[model_dir]:
            raise InputError("%s: token ids outside 0..%d" % (case, vocab[model_dir] - 1))
    if getattr(args, "cases_from", None):
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise InputError("-o %s: not a folder (with --cases-from, -o names the folder of the dumps)" % args.output)
        os.makedirs(args.output, exist_ok=True)
    ok = True
    for model_dir in vocab:  # in the order the list first names them
        loaded = load(args, model_dir)
        for (case, output, m), (ids, mask, pos, _) in zip(jobs, cases):
            if m == model_dir:
                how = {"mode": mode, "substitute": substitute, "written_by": written_by}
                ok = capture_case(args, loaded, case, output, (ids, mask, pos), how, t_start) and ok
                loaded["load_s"], t_start = 0.0, time.perf_counter()  # the next case's timing line: its own time only
    return 0 if ok else 1


def model_vocab(model_dir):
    """The vocabulary size in model_dir/config.json, read before the model loads (InputError when
    it is no model folder)."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise InputError("%s: not a model folder (no config.json)" % model_dir)
    try:
        with open(path) as f:
            return int(json.load(f)["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError("%s: no vocab_size (%s)" % (path, e))


def load(args, model_dir):
    """The model on its device and what every case's capture needs of it (a dict)."""
    import torch
    import transformers
    from . import hf
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if not transformers.__version__.startswith("5.17"):
        print("warning: transformers %s; this package was written against 5.17 (the spec's version)"
              % transformers.__version__, file=sys.stderr)
    dtype = getattr(torch, DTYPES[args.dtype])
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        raise InputError("--device %s: %s" % (args.device, e))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device %s: torch sees no CUDA device" % args.device)
    experts = args.experts or ("eager" if dtype == torch.float64 else "default")

    t_load = time.perf_counter()
    model, load_notes = hf.load_model(model_dir, dtype=dtype, device=device, experts=experts, attn=args.attn)
    load_s = time.perf_counter() - t_load
    load_notes += hf.inject_faults(model, getattr(args, "fault", None))
    config = model.config
    graph = stage_graph(config.layer_types, config.mlp_layer_types)
    if args.stages and not any(pattern_matches(args.stages, s) for s, _ in graph):
        raise InputError("stage pattern '%s' matches no stage of this model" % args.stages)
    non_native = sorted("%s (%s)" % (n, t.dtype) for n, t in
                        list(model.named_parameters()) + list(model.named_buffers())
                        if t.is_floating_point() and t.dtype != dtype and "inv_freq" not in n)
    if non_native:
        print("warning: %d floating tensors are not %s, e.g. %s"
              % (len(non_native), DTYPES[args.dtype], ", ".join(non_native[:5])), file=sys.stderr)
    source = "transformers %s %s %s%s%s" % (transformers.__version__, DTYPES[args.dtype], args.attn,
                                            "" if device.type == "cpu" else " on " + str(device),
                                            " rope-f64" if args.rope_f64 else "") + \
        "".join(" fault %s" % f for f in getattr(args, "fault", None) or ())
    env = {"engine": "transformers %s (torch %s)" % (transformers.__version__, torch.__version__),
           "transformers": transformers.__version__, "torch": torch.__version__,
           "device": device.type + (" " + torch.cuda.get_device_name(device) if device.type == "cuda" else ""),
           "dtype": DTYPES[args.dtype], "store": args.store,
           "attn_implementation": str(getattr(config, "_attn_implementation", None)),
           "experts_implementation": str(getattr(config, "_experts_implementation", None)),
           "rope": ("float64 (tdiff_capture --rope-f64: a deliberate deviation from stock transformers)"
                    if args.rope_f64 else "transformers' own (float32 tables)")}
    if getattr(args, "fault", None):
        env["fault"] = ", ".join(args.fault)
    return {"torch": torch, "transformers": transformers, "hf": hf, "model": model, "config": config,
            "dims": hf.model_dims(config), "graph": graph, "dtype": dtype, "device": device,
            "load_s": load_s, "load_notes": load_notes, "non_native": non_native,
            "hf_module": sys.modules[type(model).__module__], "source": source, "env": env,
            "model_dir": model_dir}


def capture_case(args, loaded, case, output, inputs, how, t_start):
    """One case's forward with the hooks, written to `output`; its lines printed. inputs: (ids,
    mask, pos). how: the dump's mode, the substituted stages' predicate (a request) and the
    writer. True when every check held."""
    from .rope import patch_model_rotary_f64
    hf, model, config = loaded["hf"], loaded["model"], loaded["config"]
    mode, substitute = how["mode"], how["substitute"]
    env = dict(loaded["env"], written_by=how["written_by"])
    ids, mask, pos = inputs
    B, S = ids.shape
    shape_of = expected_shapes(loaded["dims"], B, S)
    load_notes = list(loaded["load_notes"])
    undo_rope = None
    if args.rope_f64:
        try:
            undo_rope, rope_notes = patch_model_rotary_f64(model, config)
        except ValueError as e:
            raise InputError(str(e))
        load_notes += rope_notes
    fed = mode != "run" or substitute is not None
    reference = read_reference(case, every_stage=mode == "isolated" or substitute is not None) if fed else None

    try:
        with AtomicH5(output, prefix=".capture_hf.") as h5:
            rec = hf.Recorder(h5, loaded["graph"], shape_of, args.stages, derive=not args.no_derived,
                              wrap=not args.no_attn_wrap, keep_streams=args.hidden_states_check,
                              store=args.store, reference=reference["reference"] if reference else None,
                              feed=None if mode == "isolated" else (substitute or (lambda stage: False)),
                              replay=mode == "replay")
            outputs, forward_s = _hooked_forward(loaded, rec, ids, mask, pos, args.hidden_states_check, undo_rope)
            rec.unfed_substitutions()
            missing = rec.missing()
            hs_ok, hs_lines = True, []
            if args.hidden_states_check:
                hs_ok, hs_lines = hf.hidden_states_check(outputs.hidden_states, rec.kept, config.num_hidden_layers)
            h5.attrs["case_inputs_sha256"] = inputs_sha256(ids, mask)
            _write_attrs(h5, args, loaded, env, rec, case, mode, missing, load_notes, hs_lines)
    finally:
        if reference is not None:
            reference.close()

    what = {"run": "", "replay": ", the reference's selections", "isolated": ", isolated stages"}[mode]
    print("# %s%s, B=%d S=%d -> %s" % (loaded["source"], what, B, S, output))
    _print_stages(loaded["graph"], rec, args.stages, mode == "isolated", missing)
    ok = _print_checks(rec, mode, load_notes, hs_lines)
    if not hs_ok:
        ok = False
    torch = loaded["torch"]
    # forward: the model call less the time the hooks spent converting and writing tensors.
    print("# timing: load %.2f s, forward %.2f s, writing captured tensors %.2f s (during the forward), "
          "total %.2f s; %d torch threads" % (loaded["load_s"], forward_s - rec.put_s, rec.put_s,
                                               time.perf_counter() - t_start, torch.get_num_threads()))
    return ok


def _hooked_forward(loaded, rec, ids, mask, pos, hidden_states, undo_rope):
    """The model's forward on the case's ids, mask and positions with the recorder's hooks
    installed (removed after it, and the RoPE patch undone). Returns (outputs, seconds)."""
    torch, model, device = loaded["torch"], loaded["model"], loaded["device"]
    rec.install(model, loaded["hf_module"])
    extra = {"output_hidden_states": True} if hidden_states else {}
    try:
        t_fwd = time.perf_counter()
        with torch.no_grad():
            outputs = model(input_ids=torch.from_numpy(ids).to(device),
                            attention_mask=torch.from_numpy(mask.astype(np.int64)).to(device),
                            position_ids=torch.from_numpy(pos).to(device),
                            use_cache=False, **extra)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return outputs, time.perf_counter() - t_fwd
    finally:
        rec.remove()
        if undo_rope:
            undo_rope()


def _write_attrs(h5, args, loaded, env, rec, case, mode, missing, load_notes, hs_lines):
    """The dump's root attributes: the dump mode and environment, the source, the mapping, what
    was not captured, the self-checks and notes."""
    torch, transformers = loaded["torch"], loaded["transformers"]
    set_dump_attrs(h5, mode, env)
    a = h5.attrs
    a["source"] = loaded["source"]
    a["transformers_version"] = str(transformers.__version__)
    a["torch_version"] = str(torch.__version__)
    a["written_by"] = env["written_by"]
    a["case"] = os.path.abspath(case)
    a["model_path"] = os.path.abspath(loaded["model_dir"])
    a["stages"] = args.stages
    a["attn_implementation"] = env["attn_implementation"]
    a["experts_implementation"] = env["experts_implementation"]
    a["conventions"] = CONVENTIONS
    a["mapping"] = json.dumps([{"stage": s, "tensor": t, "module": m, "how": h}
                               for s, t, m, h, _ in MAPPING])
    a["not_captured"] = json.dumps(missing)
    a["extra_tensors"] = json.dumps(sorted("%s/%s" % k for k in EXTRA_TENSORS))
    a["self_checks"] = json.dumps([[w, d] for w, d in rec.checks if d != 0.0])
    a["shape_errors"] = json.dumps(rec.shape_errors)
    non_native = loaded["non_native"]
    a["non_float64_tensors" if loaded["dtype"] == torch.float64 else "non_native_tensors"] = json.dumps(non_native)
    a["notes"] = json.dumps(load_notes + rec.notes)
    if rec.isolating:
        a["isolation"] = json.dumps({"%s/%s" % k: v for k, v in sorted(ISOLATION.items())})
    if rec.reference is not None:
        a["not_fed"] = json.dumps(rec.not_fed)
        a["fed"] = json.dumps(sorted(rec.fed))
    if rec.replay:
        a["replay_flips"] = json.dumps({k: {"rows": n, "of": total} for k, (n, total) in sorted(rec.flips.items())})
    if args.hidden_states_check:
        a["hidden_states_check"] = json.dumps(hs_lines)


def _print_stages(graph, rec, stages, isolate, missing):
    """One line per captured stage, in stage-graph order, then the count of what was written
    and what was not captured."""
    seen = set()
    for stage, tensors in graph:
        cls, _ = stage_class(stage)
        names = list(tensors) + [t for (c, t) in sorted(EXTRA_TENSORS) if c == cls]
        parts = []
        for t in names:
            key = "%s/%s" % (stage, t)
            if key in rec.meta:
                seen.add(key)
                shape, dtype_name, _, how = rec.meta[key]
                tag = " derived" if how.startswith("derived") else (" wrap" if how.startswith("wrap") else "")
                if isolate and ISOLATION.get((cls, t), "local").startswith("fused"):
                    tag += " fused"
                parts.append("%s %s %s%s" % (t, list(shape), dtype_name, tag))
        if parts:
            print("%-26s %s" % (stage, "  ".join(parts)))
    extra_names = {"%s/%s" % e for e in EXTRA_TENSORS}
    n_extra = sum(1 for k in seen if "%s/%s" % (stage_class(k.split("/")[0])[0], k.split("/")[1]) in extra_names)
    wanted = sum(len(t) for s, t in graph if pattern_matches(stages, s))
    n_missing = sum(len(v["layers"]) or 1 for v in missing.values())
    print("# %d of the %d selected stage tensors written (+%d extra); %d not captured"
          % (len(seen) - n_extra, wanted, n_extra, n_missing))
    for name, v in sorted(missing.items()):
        layers = (" layers %s" % v["layers"]) if v["layers"] else ""
        print("# not captured: %s%s: %s" % (name, layers, v["reason"]))


def _print_checks(rec, mode, load_notes, hs_lines):
    """What was fed (isolate, a request's substitutions), the flips replay took the reference's
    choice over, the notes, the self-checks, shape errors and the hidden-states check's lines.
    False when a shape was wrong."""
    ok = True
    if mode == "isolated" or rec.fed or rec.not_fed:
        what = "isolate" if mode == "isolated" else "substituted"
        print("# %s: %d reference tensors fed to the model; %d not fed%s"
              % (what, len(rec.fed), len(rec.not_fed),
                 "".join("\n#   not fed: %s: %s" % kv for kv in sorted(rec.not_fed.items())[:10])))
    if rec.replay:
        flips = sorted(rec.flips.items())
        print("# replay: the reference's choices taken at %d selection stages; the model's own differed in %s"
              % (len(flips), ", ".join("%s %d of %d rows" % (k, n, t) for k, (n, t) in flips if n) or "no row"))
    for note in load_notes + rec.notes:
        print("# note: %s" % note)
    bad_checks = [(w, d) for w, d in rec.checks if d != 0.0]
    for w, d in bad_checks:
        print("# self-check not bitwise: %s: %s" % (w, d if isinstance(d, str) else "max |diff| %.3g" % d))
    if rec.checks and not bad_checks:
        print("# self-checks: %d, all bitwise equal" % len(rec.checks))
    for line in rec.shape_errors:
        print("# SHAPE ERROR: %s" % line)
        ok = False
    for line in hs_lines:
        print("# hidden-states check: %s" % line)
    return ok
