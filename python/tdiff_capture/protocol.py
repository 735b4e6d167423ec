"""The engine protocol from the PyTorch side (docs/reference/engine-protocol.md): tdiff runs an
engine with `--candidate-cmd 'CMD'` and hands it a request in $TDIFF_REQUEST (the case, where to
write the dump, the stages to take from the case's reference). A PyTorch engine reads it here and
passes `request.substituted` to generic.Recorder as `feed`, so the hooks of those stages return
the reference's tensors:

    request = read_request()                       # $TDIFF_REQUEST
    with h5py.File(request.case, "r") as case:
        rec = Recorder(model, taps, n, reference=case["reference"], feed=request.substituted)
        with torch.no_grad():
            model(**inputs_of(case))
    rec.remove()
    write_dump(request.dump, rec, request.mode, {"engine": "my-engine"})
"""
from __future__ import annotations

import json
import os

from .dump import InputError

FORMAT = "tdiff-engine-request"
ENV = "TDIFF_REQUEST"


class Request:
    def __init__(self, case, dump, mode="run", substitute=(), seed=0):
        self.case, self.dump, self.mode = case, dump, mode
        self.substitute = list(substitute)
        self.seed = seed

    def substituted(self, stage):
        """Whether `stage`'s outputs are the reference's (a Recorder's `feed`)."""
        return stage in self.substitute


def read_request(path=None):
    """The request at `path`, or at $TDIFF_REQUEST; InputError naming the file and the field."""
    path = path or os.environ.get(ENV)
    if not path:
        raise InputError("no request: $%s is not set" % ENV)
    try:
        with open(path) as f:
            j = json.load(f)
    except OSError as e:
        raise InputError("%s: cannot read the engine request (%s)" % (path, e.strerror))
    except ValueError:
        raise InputError("%s: the engine request is not JSON" % path)
    if not isinstance(j, dict) or j.get("format") != FORMAT or j.get("version") != 1:
        raise InputError("%s: not a %s of version 1" % (path, FORMAT))
    for key in ("case", "dump"):
        if not isinstance(j.get(key), str):
            raise InputError('%s: engine request without "%s"' % (path, key))
    mode = j.get("mode", "run")
    if mode not in ("run", "replay", "isolated"):
        raise InputError("%s: engine request mode '%s' is not run, replay or isolated" % (path, mode))
    substitute = j.get("substitute", [])
    if not isinstance(substitute, list) or not all(isinstance(s, str) for s in substitute):
        raise InputError('%s: engine request "substitute" is not a list of stage names' % path)
    return Request(j["case"], j["dump"], mode, substitute, int(j.get("seed", 0)))
