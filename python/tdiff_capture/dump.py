"""Case files in, candidate dumps out (the layout tdiff's dump reader and the C tap use).

A dump holds /<stage>/<tensor> datasets and the root attributes tdiff_dump = "candidate",
tdiff_dump_mode = "run" | "replay" | "isolated", case_inputs_sha256 and env.* (the environment record that `tdiff run
--candidate-dump` shows). Storage of dtypes as src/casefile/h5_reader.cpp reads them: f64, f32, f16 as
IEEE floats; bf16 as uint16 bit patterns with the attribute dtype="bf16"; indices int64; masks
uint8 with dtype="bool".
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile

import h5py
import numpy as np

EXIT_OK, EXIT_CHECK, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class InputError(Exception):
    """Bad usage or bad input: exit code 2."""


class CaptureError(Exception):
    """An internal error (exit code 3)."""


def _attr_text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, list):
        return "\n".join(_attr_text(x) for x in v)
    return str(v)


def read_case(path):
    if not os.path.isfile(path):
        raise InputError("%s: no such case file" % path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise InputError("%s: not an HDF5 file (%s)" % (path, e))
    with f:
        for name in ("ids", "mask"):
            if "inputs/" + name not in f:
                raise InputError("%s: no dataset '/inputs/%s' (not a tdiff case file?)" % (path, name))
        ids = np.asarray(f["inputs/ids"][()])
        mask = np.asarray(f["inputs/mask"][()])
        pos = np.asarray(f["inputs/pos"][()]) if "inputs/pos" in f else None
        root_attrs = {k: _attr_text(v) for k, v in f.attrs.items()}
        input_attrs = {k: _attr_text(v) for k, v in f["inputs"].attrs.items()}
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise InputError("%s: '/inputs/ids' must be a 2-D integer dataset, found %s %s"
                         % (path, ids.dtype, list(ids.shape)))
    if mask.shape != ids.shape:
        raise InputError("%s: '/inputs/mask' has shape %s, '/inputs/ids' %s"
                         % (path, list(mask.shape), list(ids.shape)))
    if mask.dtype.kind == "f" or not np.isin(mask.astype(np.int64), (0, 1)).all():
        raise InputError("%s: '/inputs/mask' must hold 0/1 (bool), found %s" % (path, mask.dtype))
    ids = ids.astype(np.int64)
    mask = mask.astype(np.int64) != 0
    B, S = ids.shape
    if pos is None:
        pos = np.broadcast_to(np.arange(S, dtype=np.int64), (B, S)).copy()
    elif pos.shape != ids.shape or pos.dtype.kind not in "iu":
        raise InputError("%s: '/inputs/pos' must be an integer dataset shaped like '/inputs/ids'" % path)
    return ids, mask, pos.astype(np.int64), root_attrs, input_attrs


def check_right_padding(mask, path, allow_left=False):
    """transformers reproduces the model only for right padding (model-spec §5.12): refuse left padding,
    or with allow_left (a candidate's capture, not the oracle's) say so and go on: its left-padded
    rows then differ from the model, which is what the dump's report shows."""
    left = []
    for b, row in enumerate(mask):
        real = np.flatnonzero(row)
        if real.size == 0:
            continue
        first, last = int(real[0]), int(real[-1])
        if real.size != last - first + 1:
            raise InputError("%s: row %d: the real tokens are not contiguous in '/inputs/mask'" % (path, b))
        if first != 0:
            left.append((b, first))
    if not left:
        return
    b, first = left[0]
    if not allow_left:
        raise InputError(
            "%s: row %d is left-padded (its first real token is at index %d). transformers' "
            "DeepSeek-V4 computes the model only for right padding: with left padding its "
            "compressors pool the pad tokens and the compression windows are shifted "
            "(model-spec §5.12), so it is no oracle there. Make the case with --pad-side right (or, "
            "with tdiff-capture, capture it as a candidate: --allow-left-padding)." % (path, b, first))
    print("warning: %s: %d left-padded row%s (row %d from index %d), captured as asked "
          "(--allow-left-padding): transformers computes those rows from the row's start, "
          "pads included (model-spec §5.12), so they differ from the model" %
          (path, len(left), "" if len(left) == 1 else "s", b, first), file=sys.stderr)


def read_reference(case_path, why="isolate feeds the reference's tensors to the model", every_stage=True):
    """An open h5py file of the case that holds /reference (isolate, replay, a request's
    substitutions), or InputError saying why it is needed. `every_stage`: the caller reads
    stages inside the layers, which a boundaries reference (tdiff golden --store boundaries)
    does not store (tdiff recomputes them; h5py cannot): refused, naming the way out."""
    f = h5py.File(case_path, "r")
    if "reference" not in f:
        f.close()
        raise InputError("%s: no /reference (run `tdiff golden %s` first: %s)" % (case_path, case_path, why))
    store = f["reference"].attrs.get("store", b"")
    if every_stage and (store.decode() if isinstance(store, bytes) else str(store)) == "boundaries":
        f.close()
        raise InputError("%s: its /reference stores the layer boundaries only (tdiff golden --store boundaries) and %s: "
                         "store every stage with `tdiff golden %s`" % (case_path, why, case_path))
    return f


def inputs_sha256(ids, mask):
    """The SHA-256 of a case's inputs as tdiff computes it (src/model/batch.h): the shape [B, S]
    as two int64, then per position the id as int64 and the mask as uint8."""
    per_position = np.empty(ids.size, dtype=[("id", "<i8"), ("mask", "u1")])
    per_position["id"] = ids.reshape(-1)
    per_position["mask"] = mask.reshape(-1)
    h = hashlib.sha256(np.array(ids.shape, dtype="<i8").tobytes())
    h.update(per_position.tobytes())
    return h.hexdigest()


# torch dtype name -> the tdiff dtype it is written as (store="native").
NATIVE = {"torch.float64": "f64", "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}


def to_numpy(t, kind, store):
    """A torch tensor -> (numpy array, tdiff dtype name, dtype attribute or None).
    kind: f value, i index, b mask. store: "f64" (every float widened exactly to float64: the
    oracle's files) or "native" (the dtype the tensor has: what the model really held)."""
    import torch
    t = t.detach()
    if kind == "i":
        return np.ascontiguousarray(t.to(device="cpu", dtype=torch.int64, copy=True).numpy()), "i64", None
    if kind == "b":
        arr = t.to(device="cpu").bool().to(dtype=torch.uint8, copy=True).numpy()
        return np.ascontiguousarray(arr), "bool", "bool"
    name = NATIVE.get(str(t.dtype), "f64") if store == "native" else "f64"
    if name == "bf16":
        bits = t.to(device="cpu").contiguous().view(torch.int16).numpy().view(np.uint16)
        return np.ascontiguousarray(bits), "bf16", "bf16"
    dt = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16}[name]
    return np.ascontiguousarray(t.to(device="cpu", dtype=dt, copy=True).numpy()), name, None


def from_numpy(arr, attrs):
    """A dataset's array (+ its attributes) -> a torch tensor; bf16 bit patterns decoded."""
    import torch
    tag = attrs.get("dtype")
    if isinstance(tag, bytes):
        tag = tag.decode()
    if tag == "bf16":
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    if tag == "bool":
        return torch.from_numpy(np.asarray(arr) != 0)
    return torch.from_numpy(np.ascontiguousarray(arr))


class AtomicH5:
    """An h5py file written under a temporary name beside `path` and renamed at close();
    discard() (or an exception inside `with`) leaves nothing behind."""

    def __init__(self, path, prefix=".tdiff_capture."):
        out_dir = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(out_dir):
            raise InputError("%s: the output folder does not exist" % out_dir)
        fd, self.tmp = tempfile.mkstemp(dir=out_dir, prefix=prefix, suffix=".h5.tmp")
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp makes it 0600; give it a normal file's mode
        self.path = path
        self.h5 = h5py.File(self.tmp, "w")

    def __enter__(self):
        return self.h5

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.h5.close()
            os.replace(self.tmp, self.path)
        else:
            self.discard()
        return False

    def discard(self):
        try:
            self.h5.close()
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


def write_tensor(h5, key, arr, attr_dtype, attrs=None):
    """One dataset; ids, selections and masks of 1 MiB or more are compressed (floats are not:
    deflate gains little on them and took most of the time of a large capture)."""
    opts = {}
    if arr.size and arr.nbytes >= (1 << 20) and arr.dtype.kind in "iub" and attr_dtype != "bf16":
        opts = dict(compression="gzip", compression_opts=1, shuffle=True)
    ds = h5.create_dataset(key, data=arr, **opts)
    if attr_dtype:
        ds.attrs["dtype"] = attr_dtype
    for k, v in (attrs or {}).items():
        ds.attrs[k] = v
    return ds


def set_dump_attrs(h5, mode, env):
    """The attributes tdiff's dump reader reads: tdiff_dump, tdiff_dump_mode, env.*."""
    h5.attrs["tdiff_dump"] = "candidate"
    h5.attrs["tdiff_dump_mode"] = mode
    for k, v in env.items():
        h5.attrs["env." + k] = str(v)
