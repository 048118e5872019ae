"""Full linear layer, float16 x [M, K] and weights [N, K] -> float16 [M, N], on the seed shapes:
the W8A8 implementations and the baselines users compare them against, one class per full
contender of int8nax.bench.contenders, as the registry names it (common.contender_classes)."""

from .common import contender_classes

globals().update(contender_classes("full", __name__))
