"""MLX's refusals met inside a call, reworded to name the public function, the argument and the
way out: evaluation refused inside mx.compile/mx.vmap, an unevaluated array of another thread, an
unknown or unavailable backend."""

from __future__ import annotations

import mlx.core as mx

from .. import backends


def _untraceable(func: str, impl: backends.Backend, call):
    """call() with MLX's refusal to evaluate inside mx.compile/mx.vmap (what a backend computing
    its inputs outside the graph would meet there; the CPU backend's own graph path avoids it)
    turned into a message naming the function and the way out."""
    try:
        return call()
    except ValueError as exc:
        _reraise_untraceable(func, impl, exc)


def _reraise_untraceable(func: str, impl: backends.Backend, exc: ValueError):
    """Raise `exc`, or for MLX's refusal the message _untraceable gives (called in an except)."""
    if not backends.refused_by_trace(exc):
        raise exc
    raise ValueError(
        f"{func}: the {impl.name} backend evaluated its inputs outside MLX's graph inside mx.compile "
        "or mx.vmap, which MLX refuses; call it outside the compiled/vmapped function"
    ) from exc


# MLX (0.32) gives every thread its own streams and evaluates an array only on a thread that
# holds the stream its graph was built on: an unevaluated array made on one thread and passed
# to int8nax on another fails wherever it is evaluated, with MLX's "There is no Stream(cpu, 0)
# in current thread". The CPU backend evaluates its inputs during the call; the message then
# names the argument and the way out.
_FOREIGN_STREAM = "in current thread"


def _reraise_foreign(func: str, exc: RuntimeError, named) -> None:
    """Raise `exc`, or for MLX's refusal to evaluate another thread's graph a RuntimeError
    naming the argument (called in an except; `named`: (name, array or None) pairs)."""
    if _FOREIGN_STREAM not in str(exc):
        raise exc
    culprit = None
    for name, arr in named:
        try:
            if arr is not None:
                mx.eval(arr)
        except RuntimeError:
            culprit = name
            break
    what = f"'{culprit}' is" if culprit else "an input is"
    raise RuntimeError(
        f"{func}: {what} an unevaluated mx.array made on another thread, and MLX evaluates a graph "
        f"only on the thread that built it ({exc}); call mx.eval on it in that thread before "
        "passing it to another"
    ) from exc


def _resolve(backend, func: str):
    """backends.resolve(backend), its refusal (an unknown or unavailable backend, by argument or
    INT8NAX_BACKEND) led by the public function's name, as every other usage error is."""
    try:
        return backends.resolve(backend)
    except (RuntimeError, ValueError) as exc:
        raise type(exc)(f"{func}: {exc}") from None
