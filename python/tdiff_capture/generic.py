"""Hooks from a table of Taps (mapping.Tap) on any PyTorch model: the way to capture, or
isolate, an implementation other than transformers'. See README.md, "Extending the mapping".

    rec = Recorder(model, taps, num_layers, store="native", reference=None)  # or an h5py group
    with torch.no_grad():
        model(...)
    rec.remove()
    rec.write(h5)            # /<stage>/<tensor> datasets; set_dump_attrs() for the header
"""
from __future__ import annotations

from .dump import from_numpy, to_numpy, write_tensor
from .mapping import TRANSFORMS, parse_where


class Recorder:
    def __init__(self, model, taps, num_layers=0, store="native", reference=None, shapes=None, feed=None):
        """taps: [Tap]; "{l}" in a module path is expanded for l in range(num_layers).
        reference: the case's /reference group to isolate with (each tapped value is recorded
        and then replaced by the reference's). feed: which stages get the reference's values
        (a predicate on the stage name; default: every one, isolate; a tdiff request's
        `substituted`: the stages it takes from the reference, protocol.py). shapes:
        {"stage/tensor": shape} for the "reshape" transform (default: the reference's shapes
        when given)."""
        self.store = store
        self.reference = reference
        self.feed = feed or (lambda stage: True)
        self.shapes = dict(shapes or {})
        self.values = {}      # "stage/tensor" -> (tensor in tdiff's layout, kind)
        self.fed = set()
        self.handles = []
        modules = dict(model.named_modules())
        for tap in taps:
            layers = range(num_layers) if "{l}" in tap.module else [None]
            for l in layers:
                path = tap.module.format(l=l) if l is not None else tap.module
                stage = tap.stage.replace("Lxx.", "L%02d." % l) if l is not None else tap.stage
                if path not in modules:
                    raise KeyError("tap %s/%s: no module '%s' in the model" % (stage, tap.tensor, path))
                self._install(modules[path], stage, tap)

    def _shape(self, key):
        if key in self.shapes:
            return tuple(self.shapes[key])
        if self.reference is not None and key in self.reference:
            return tuple(self.reference[key].shape)
        return None

    def _record(self, key, value, tap):
        to_tdiff, _ = TRANSFORMS[tap.transform]
        if key in self.values:
            raise RuntimeError("%s was captured twice (a module ran twice in one forward?)" % key)
        self.values[key] = (to_tdiff(value, self._shape(key)).detach(), tap.kind)

    def _feed(self, key, like, tap):
        if self.reference is None or key not in self.reference or not self.feed(key.split("/")[0]):
            return like
        _, from_tdiff = TRANSFORMS[tap.transform]
        ds = self.reference[key]
        self.fed.add(key)
        return from_tdiff(from_numpy(ds[()], dict(ds.attrs)), like).to(device=like.device, dtype=like.dtype)

    def _install(self, module, stage, tap):
        key = "%s/%s" % (stage, tap.tensor)
        side, idx = parse_where(tap.where)
        if side == "output":
            def hook(mod, args, out):
                value = out if idx is None else out[idx]
                self._record(key, value, tap)
                if self.reference is None:
                    return None
                fed = self._feed(key, value, tap)
                if idx is None:
                    return fed
                out = list(out)
                out[idx] = fed
                return tuple(out)
            self.handles.append(module.register_forward_hook(hook))
        elif side == "input":
            def pre(mod, args):
                self._record(key, args[idx], tap)
                if self.reference is None:
                    return None
                args = list(args)
                args[idx] = self._feed(key, args[idx], tap)
                return tuple(args)
            self.handles.append(module.register_forward_pre_hook(pre))
        else:
            def pre_kw(mod, args, kwargs):
                self._record(key, kwargs[idx], tap)
                if self.reference is None:
                    return None
                kwargs = dict(kwargs)
                kwargs[idx] = self._feed(key, kwargs[idx], tap)
                return args, kwargs
            self.handles.append(module.register_forward_pre_hook(pre_kw, with_kwargs=True))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def write(self, h5):
        """Every recorded tensor as /<stage>/<tensor> (dtype per `store`); returns the keys."""
        for key, (value, kind) in self.values.items():
            arr, _, attr_dtype = to_numpy(value, kind, self.store)
            write_tensor(h5, key, arr, attr_dtype)
        return sorted(self.values)
