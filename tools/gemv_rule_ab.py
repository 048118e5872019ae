"""mlx-lm's loop under W8A8's two decode-GEMV rules, in one process.

    python tools/gemv_rule_ab.py [--model qwen3-8b] [--layers N] [--vocab V] [--prompt-tokens 512]
                                 [--generation-tokens 128] [--trials 7] [--peers mlx-q8,bf16] [--json FILE]

At M <= 16 a W8A8 call runs the quantization kernel and then the GEMV (cuda_plans.gemv.
GEMV_QUANTIZE_INSIDE off, the default), or one GEMV that quantizes x itself (on). Kernel time
favours the first (docs/results/cuda-h100.md, the decode GEMV's schedules section); it launches one
kernel more a call, and a batch-1 decode step on the lent VMs is paced by the host as much as by
the GPU. So only mlx-lm's loop can say which rule a user's generation gains from.

Each trial times one stream_generate request per arm (ms a generated token: mlx-lm's generation
tps, inverted) after the same seeded prompt: the peers' forms, W8A8 with x quantized apart, W8A8
with it inside; the order reverses every other trial, so drift of the host cancels in the
trial-by-trial ratio. Between W8A8's arms the rule is switched and backend.clear_caches() forgets
the entry points and tapes built under the other; an untimed 8-token request before each timed
one rebuilds them. Then each arm's GPU busy ms a token (CUPTI over 32 tokens; needs torch and a
CUDA GPU, else the reason is printed). The model is a seeded random-weight folder
(bench.model_folder), as the breakdown's. On the CPU both W8A8 arms run the same code. The rule is
restored on exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from int8nax.bench import argtypes, generate, generate_breakdown, model_folder, models  # noqa: E402
from int8nax.bench.peers import Unavailable  # noqa: E402

PEERS = ("bf16", "mlx-q8")
"""Forms the tool can time beside W8A8 (bench.models.convert's names)."""

APART, INSIDE = "w8a8 apart", "w8a8 inside"
WARM_TOKENS = 8
GPU_TOKENS = 32


def _peers(text: str) -> tuple[str, ...]:
    got = tuple(p.strip() for p in text.split(",") if p.strip())
    if any(p not in PEERS for p in got) or len(set(got)) != len(got):
        raise argparse.ArgumentTypeError(f"expected none or some of {','.join(PEERS)}, comma-separated, got {text!r}")
    return got


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gemv_rule_ab.py", description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("--model", choices=sorted(models.CONFIGS), default="qwen3-8b")
    p.add_argument("--layers", type=argtypes.count(1), help="decoder layers (default: the model's)")
    p.add_argument("--vocab", type=argtypes.count(len(model_folder.ALPHABET)), help="vocabulary (default: the model's)")
    p.add_argument("--prompt-tokens", type=argtypes.count(1), default=512)
    p.add_argument("--generation-tokens", type=argtypes.count(2), default=128)
    p.add_argument("--trials", type=argtypes.count(1, 100), default=7)
    p.add_argument("--peers", type=_peers, default=("mlx-q8",),
                   help=f"forms timed beside W8A8 ({','.join(PEERS)}; '' for none)")
    p.add_argument("--json", type=argtypes.output_file, help="write the trials here")
    return p


def measure(args, say=print) -> dict:
    """{"ms": {arm: [ms a token per trial]}, "gpu": {arm: [busy ms or None, why not]}} for the arms
    args.peers + (APART, INSIDE)."""
    from int8nax.backends.cuda import backend as cuda
    from int8nax.backends.cuda.plans import gemv as rule

    cfg = models.CONFIGS[args.model]
    vocab = args.vocab or cfg.vocab
    path = model_folder.folder(cfg, layers=args.layers, vocab=vocab, progress=say)
    prompt = generate.prompts(args.prompt_tokens, 1, vocab)[0]
    loaded = {}
    for form in (*args.peers, "w8a8"):
        say(f"loading {form}")
        loaded[form] = generate.load(path, form)[:2]
    arms = [*args.peers, APART, INSIDE]
    was = rule.GEMV_QUANTIZE_INSIDE

    def ready(arm: str) -> tuple:
        if arm in (APART, INSIDE) and rule.GEMV_QUANTIZE_INSIDE != (arm == INSIDE):
            rule.GEMV_QUANTIZE_INSIDE = arm == INSIDE
            cuda.clear_caches()
        model = loaded["w8a8" if arm in (APART, INSIDE) else arm]
        generate_breakdown.decode_call(*model, prompt, WARM_TOKENS)  # untimed: what the switch forgot
        return model

    ms = {arm: [] for arm in arms}
    try:
        for t in range(args.trials):
            for arm in (arms if t % 2 == 0 else arms[::-1]):
                ms[arm].append(generate_breakdown.decode_call(*ready(arm), prompt, args.generation_tokens))
            say(f"trial {t + 1} of {args.trials}: " + ", ".join(f"{a} {v[-1]:.3f}" for a, v in ms.items()))
        gpu = {arm: list(generate_breakdown.decode_gpu_ms(*ready(arm), prompt, GPU_TOKENS)) for arm in arms}
    finally:
        if rule.GEMV_QUANTIZE_INSIDE != was:
            rule.GEMV_QUANTIZE_INSIDE = was
            cuda.clear_caches()
    return {"ms": ms, "gpu": gpu}


def report(got: dict) -> str:
    ms, gpu = got["ms"], got["gpu"]
    med = {arm: statistics.median(v) for arm, v in ms.items()}
    lines = ["arm            ms a token: median (min-max)   tok/s vs apart   GPU busy ms a token"]
    for arm, v in ms.items():
        busy = f"{gpu[arm][0]:.3f}" if gpu[arm][0] is not None else f"n/a ({gpu[arm][1]})"
        spread = f"{med[arm]:.3f} ({min(v):.3f}-{max(v):.3f})"
        lines.append(f"{arm:12s}   {spread:29s}  {med[APART] / med[arm]:.3f}x           {busy}")
    pairs = generate.paired_ratios(ms[INSIDE], ms[APART])
    lines.append(f"inside / apart, trial by trial (ms): {', '.join(f'{p:.3f}' for p in pairs)}; median "
                 f"{_median_around(pairs)}")
    # issue 48's batch-1 generation targets, judged on the interval of the trial-by-trial ratio
    for peer in (arm for arm in ms if arm not in (APART, INSIDE)):
        over = ", ".join(f"{arm} {_median_around(generate.paired_ratios(ms[peer], ms[arm]))}" for arm in (APART, INSIDE))
        lines.append(f"tok/s over {peer}, trial by trial: {over}")
    return "\n".join(lines)


def _median_around(ratios: list[float]) -> str:
    """"1.034 (94% interval 1.010-1.050)": the ratios' median and generate.median_interval's interval."""
    interval = generate.median_interval(ratios)
    around = (f" ({interval[2]:.0%} interval {interval[0]:.3f}-{interval[1]:.3f})" if interval
              else " (no interval under 5 trials)")
    return f"{statistics.median(ratios):.3f}{around}"


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    t0 = time.perf_counter()
    try:
        got = measure(args, say=lambda text: print(f"[{time.perf_counter() - t0:.0f} s] {text}", file=sys.stderr))
    except Unavailable as exc:
        print(f"gemv_rule_ab.py: cannot run here: {exc}", file=sys.stderr)
        return 1
    print(f"{args.model}, {args.layers or models.CONFIGS[args.model].depth} layers: a {args.prompt_tokens}-token "
          f"prompt, {args.generation_tokens} new tokens, {args.trials} trials (mlx-lm's stream_generate)")
    print(report(got))
    if args.json:
        Path(args.json).write_text(json.dumps({**got, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
