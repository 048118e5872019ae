"""A linear's arrays checked once (int8nax.nn's layers and sibling groups): bind and the
BoundLinear it gives, whose call checks only its input and goes to the backend."""

from __future__ import annotations

import mlx.core as mx

from .. import backends
from ..backends import env_raw, tape
from .._checks import check_k, check_ndim, check_vector
from .arguments import _ARRAY, _FLOAT32, _FLOATS, _INT8, _check_scales
from .errors import _reraise_foreign, _reraise_untraceable
from .linear import _W8A8, _Linear
from .tracing import _detects, _may_skip_custom


def _nothing():
    return None


class BoundLinear:
    """An op of _Linear (bind makes w8a8_linear's) with its weight, scales and bias checked once,
    for a layer that calls it with the same arrays again and again (int8nax.nn): a call checks
    only its input (type, width, dtype, not empty, not traced) and goes to the backend.

    Where the backend builds the call as a lazy graph (Backend.w8a8_linear_graph) and tapes can
    serve (backends.tape), the graph of an x shape, dtype and stream is recorded at its first call
    and replayed in one C++ step at every later one with INT8NAX_BACKEND's same value (part of the
    recording's key: it chooses the backend). Else the backend's compiled entry point (Backend.w8a8_linear_marked), else its plain
    call. `parts`: the sibling group's split points (bound_parts), whose calls give the tuple of
    the members' outputs instead of y (the split is then in the recording too).

    Made by bind(). The arrays are held, not copied: whoever swaps one (a layer's weight
    replaced) binds anew; an array changed in place (w[i] = v) is not checked again. Pickling
    or copying gives None (bind again from the copy's arrays). Thread-safe: the recordings are
    made and replayed under the GIL; nothing else in it changes after bind().
    """

    __slots__ = ("op", "w", "scale_w", "bias", "backend", "width", "n", "method", "marked", "parts", "tapes")

    def __init__(self, op: _Linear, w, scale_w, bias, backend, parts: tuple[int, ...] | None = None):
        self.op, self.w, self.scale_w, self.bias, self.backend = op, w, scale_w, bias, backend
        self.width = op.halves * w.shape[1]
        self.n = w.shape[0]
        self.method = op.method
        # Backend.w8a8_linear_marked is W8A8's (swiglu takes the two checks), and its flag tells
        # traced calls apart only where _detects() (asked by bind() before: _may_skip_custom)
        self.marked = op is _W8A8 and _detects()
        self.parts = parts
        self.tapes = None  # made at the first call a backend's graph can be recorded for

    def __reduce__(self):
        return (_nothing, ())

    def taped(self) -> bool:
        """Whether a call of these arrays was recorded (and not forgotten since)."""
        tapes = self.tapes
        return tapes is not None and len(tapes) > 0

    def bound_parts(self, parts: tuple[int, ...]) -> "BoundLinear":
        """The same arrays (not checked again), whose calls give the outputs split at `parts`
        along the last axis (a sibling group's members)."""
        return BoundLinear(self.op, self.w, self.scale_w, self.bias, self.backend, tuple(parts))

    def fast(self, x):
        """y [..., N] in x's dtype for x [..., width] (a tuple of y's parts where `parts`), or None
        where x needs the general path: not an mx.array, another width or dtype, an empty problem,
        a backend choice that cannot run (the bound backend, INT8NAX_BACKEND's or auto's: the
        general path says why), or x traced by a transformation (the gradient needs the custom
        function). The arrays of bind() are not tracers, so x is the only argument that can be one."""
        tapes = self.tapes
        if tapes is not None and type(x) is _ARRAY:
            y = tapes(x, env_raw())
            if y is not None:
                return y
        if type(x) is not _ARRAY:
            return None
        xs = x.shape
        if not xs or xs[-1] != self.width or x.dtype not in _FLOATS or 0 in xs:
            return None
        try:
            impl = backends.resolve(self.backend)  # INT8NAX_BACKEND read in there, answers kept
        except (RuntimeError, ValueError):
            return None
        if self.op is _W8A8 and getattr(impl, "w8a8_linear_graph", None) is not None:
            y = self._recorded(impl, x)
            if y is not None:
                return y
        y = self._entry_output(impl, x)
        if y is None or self.parts is None:
            return y
        return tuple(mx.split(y, self.parts, axis=-1))

    def _reraise(self, impl, exc, rows):
        op = self.op
        if isinstance(exc, ValueError):
            _reraise_untraceable(op.func, impl, exc)
        _reraise_foreign(op.func, exc, ((op.x_name, rows), ("w_int8", self.w), ("scale_w", self.scale_w),
                                        ("bias", self.bias)))

    def _recorded(self, impl, x):
        """The backend's graph on x, recorded for x's signature; None where no tape can record it
        (no tapes in this process, or x a tracer)."""
        module = tape.module()
        if module is None:  # none in this process (any kept are dropped: INT8NAX_TAPES turned off)
            self.tapes = None
            return None
        tapes = self.tapes
        if tapes is None:
            tapes = self.tapes = tape.new(1 if self.parts is None else len(self.parts) + 1)
        if module.is_tracer(x):
            return None
        try:
            y = impl.w8a8_linear_graph(x, self.w, self.scale_w, self.bias)
        except (ValueError, RuntimeError) as exc:
            self._reraise(impl, exc, x)
        if y is None:
            return None
        outputs = [y] if self.parts is None else mx.split(y, self.parts, axis=-1)
        tapes.record(x, outputs, env_raw())
        return y if self.parts is None else tuple(outputs)

    def _entry_output(self, impl, x):
        """y for x through the backend's compiled entry point where it has one, else its plain
        call on x's rows; None where x may be traced (the general path then serves it)."""
        entry = getattr(impl, "w8a8_linear_marked", None) if self.marked else None  # stand-ins may lack it
        if entry is not None:
            w, scale_w, bias = self.w, self.scale_w, self.bias
            try:
                marked = entry(x, w, scale_w, bias)
            except (ValueError, RuntimeError) as exc:
                self._reraise(impl, exc, x)
            if marked is not None:
                y, maybe_traced = marked
                # the body ran: a signature's first call (y is right) or a tracer (y is dropped)
                return y if not maybe_traced or _may_skip_custom(x) else None
        if not _may_skip_custom(x):
            return None
        call = getattr(impl, self.method)  # looked up per call: tests patch backends
        xs = x.shape
        if len(xs) == 2:
            rows = x
        else:  # explicit sizes: reshape(-1, K) costs MLX ~0.15 µs more
            m = 1
            for d in xs[:-1]:
                m *= d
            rows = x.reshape(m, xs[-1])
        try:
            y = call(rows, self.w, self.scale_w, self.bias)
        except (ValueError, RuntimeError) as exc:
            self._reraise(impl, exc, rows)
        return y if len(xs) == 2 else y.reshape(xs[:-1] + (self.n,))


def bind(w, scale_w, bias=None, *, backend: str | None = None, func: str = "w8a8_linear",
         names: tuple[str, str, str] = ("w_int8", "scale_w", "bias")) -> BoundLinear | None:
    """The arrays of w8a8_linear checked once: w int8 [N, K],
    scale_w float32 [N] positive and finite, bias None or float16/bfloat16/float32 [N], all
    mx.arrays; errors name `func` and the arrays by `names`. None where an array is a tracer
    (inside a transformation: the call then takes the general path, which checks it there) or
    not an mx.array or of another dtype the general path converts (numpy, a float64 bias)."""
    arrays = (w, scale_w) if bias is None else (w, scale_w, bias)
    if any(type(a) is not _ARRAY for a in arrays):
        return None
    if w.dtype != _INT8 or scale_w.dtype != _FLOAT32 or (bias is not None and bias.dtype not in _FLOATS):
        return None
    wn, sn, bn = names
    check_ndim(w, wn, func, 2, "[N, K]")
    n, k = w.shape
    if n == 0 or k == 0:
        return None
    check_k(k, func)
    check_vector(scale_w, sn, func, n, "one scale per output channel")
    if bias is not None:
        check_vector(bias, bn, func, n, "one value per output channel")
    if not _may_skip_custom(*arrays):
        return None
    _check_scales(scale_w, sn, func)
    return BoundLinear(_W8A8, w, scale_w, bias, backend)
