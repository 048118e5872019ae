"""The Metal GEMM tile chosen on the device (backends/metal/tiles.py and metal_timing.time_tiles): the
choice, its on-disk cache (round trip, a corrupt file ignored and rewritten, atomic writes),
the forced tile, the backend recording the winner, and the timing function itself run on the
g++ stand-in (every candidate exact) and on a recorder (a wrong candidate left out). No timing
here says anything about an M5: the stand-in's times are a CPU's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import tiling
from int8nax.backends import cache as backend_cache
from int8nax.backends.metal import backend as metal, kernel_set as metal_kernel_set, launch as metal_launch
from int8nax.backends.metal import source as metal_source, tiles as metal_tiles, timing as metal_timing

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
sys.path.insert(0, str(Path(__file__).parent))
import mlx_stand_in  # noqa: E402
import shim  # noqa: E402
from test_metal_backend import FakeOps, fake_m5  # noqa: E402
from test_metal_dispatch import RecordingFactory  # noqa: E402

NAMES = [c.name for c in tiling.METAL_LARGE_CANDIDATES]
KEY = "applegpu_g17s|Apple M5 Max|mlx 0.32.4|mlx_layout/relaxed_precision=true|kernels abc"


class Timer:
    """measure(candidates): fixed seconds per candidate name; counts its calls."""

    def __init__(self, seconds):
        self.seconds, self.calls = seconds, 0

    def __call__(self, candidates):
        self.calls += 1
        return {c.name: self.seconds[c.name] for c in candidates}


SECONDS = {"metal_128x128": 0.0016, "metal_64x128": 0.0014, "metal_128x128_8sg": "over the pipeline's threadgroup limit"}


def test_candidates():
    assert NAMES == ["metal_128x128", "metal_64x128", "metal_128x128_8sg"]
    assert [c.threads for c in tiling.METAL_LARGE_CANDIDATES] == [512, 256, 256]
    assert tiling.METAL_LARGE.bk == 512 and tiling.METAL_LARGE.wm * tiling.METAL_LARGE.wn == 16  # cider's
    assert (tiling.METAL_MEDIUM.bm, tiling.METAL_MEDIUM.wm, tiling.METAL_MEDIUM.bk) == (64, 2, 256)  # MLX 's'/'c'/'d'
    assert tiling.METAL_WIDE8.wm * tiling.METAL_WIDE8.wn == 8


def test_cache_round_trip(tmp_path):
    path = tmp_path / "sub" / metal_tiles.CACHE_FILE
    timer = Timer(SECONDS)
    first = metal_tiles.choose_tile(KEY, timer, path=path)
    assert first.config == tiling.METAL_MEDIUM and first.source == "measured" and timer.calls == 1
    assert first.timings_ms["metal_64x128"] == pytest.approx(1.4)
    assert first.timings_ms["metal_128x128_8sg"] == "over the pipeline's threadgroup limit"
    data = json.loads(path.read_text())
    assert data[KEY]["winner"] == "metal_64x128" and data[KEY]["shape"] == list(metal_tiles.TUNE_SHAPE)
    assert [p.name for p in path.parent.iterdir()] == [metal_tiles.CACHE_FILE]  # no temporary file left
    again = metal_tiles.choose_tile(KEY, timer, path=path)
    assert again.config == tiling.METAL_MEDIUM and again.source == "cache" and timer.calls == 1
    assert again.timings_ms == first.timings_ms and "1.400 ms" in again.summary()
    # another device or MLX version is timed on its own, and both entries are kept
    other = KEY.replace("mlx 0.32.4", "mlx 0.33.0")
    metal_tiles.choose_tile(other, Timer({**SECONDS, "metal_128x128": 0.001}), path=path)
    data = json.loads(path.read_text())
    assert data[KEY]["winner"] == "metal_64x128" and data[other]["winner"] == "metal_128x128"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "", '{"%s": {"winner": "metal_256x256"}}' % KEY])
def test_corrupt_cache_is_ignored_and_rewritten(tmp_path, content):
    path = tmp_path / metal_tiles.CACHE_FILE
    path.write_text(content)
    timer = Timer(SECONDS)
    choice = metal_tiles.choose_tile(KEY, timer, path=path)
    assert timer.calls == 1 and choice.source == "measured" and choice.config == tiling.METAL_MEDIUM
    assert json.loads(path.read_text())[KEY]["winner"] == "metal_64x128"


def test_unwritable_cache_does_not_stop_the_choice(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    choice = metal_tiles.choose_tile(KEY, Timer(SECONDS), path=blocker / metal_tiles.CACHE_FILE)
    assert choice.config == tiling.METAL_MEDIUM and any("cache not written" in n for n in choice.notes)


def test_nothing_timed_keeps_the_measured_tile(tmp_path):
    choice = metal_tiles.choose_tile(KEY, Timer({n: "failed: x" for n in NAMES}), path=tmp_path / "c.json")
    assert choice.config == tiling.METAL_LARGE and choice.source == "default"
    assert not (tmp_path / "c.json").exists()


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(backend_cache.CACHE_ENV, str(tmp_path))
    assert metal_tiles.cache_path() == tmp_path / metal_tiles.CACHE_FILE
    monkeypatch.delenv(backend_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform != "darwin":
        assert backend_cache.cache_dir() == tmp_path / "xdg" / "int8nax"


def test_cache_key_names_what_it_holds_for():
    key = metal_tiles.cache_key("applegpu_g17s", "Apple M5 Pro", "0.32.4", "generic/relaxed_precision=true", "src")
    assert key.startswith("applegpu_g17s|Apple M5 Pro|mlx 0.32.4|generic/relaxed_precision=true|kernels ")
    assert key != metal_tiles.cache_key("applegpu_g17s", "Apple M5 Pro", "0.32.4", "generic/relaxed_precision=true",
                                        "src changed")


def test_backend_records_the_winner(monkeypatch, tmp_path):
    """On a pretend M5 with a timer: the winner serves M > 64 (describe says so, small M keeps
    its tile), and the probe's reason (int8nax.info()) names it with the timings; a second
    process (a new backend) reads the cache and times nothing."""
    monkeypatch.setenv(backend_cache.CACHE_ENV, str(tmp_path))
    calls = []

    def timer(kernels, variant, gpu, candidates):
        calls.append(variant.name)
        return {c.name: SECONDS[c.name] for c in candidates}

    backend = fake_m5()
    backend._tile_timer = timer
    probe = backend.probe()
    assert probe.available and "tile for M > 64: metal_64x128 (64x128x256, 256 threads), measured" in probe.reason
    assert calls == ["mlx_layout/relaxed_precision=true"]
    assert backend.tiles.config == tiling.METAL_MEDIUM and backend._ops.large == tiling.METAL_MEDIUM
    assert "metal_64x128 (64x128x256" in backend.describe("int8_matmul", 2048, 4096, 4096)
    assert "metal_32x128" in backend.describe("int8_matmul", 33, 4096, 4096)
    second = fake_m5()
    second._tile_timer = timer
    assert "metal_64x128" in second.probe().reason and second.tiles.source == "cache" and len(calls) == 1


def test_a_failing_timer_never_costs_nax(monkeypatch, tmp_path):
    monkeypatch.setenv(backend_cache.CACHE_ENV, str(tmp_path))
    backend = fake_m5()
    backend._tile_timer = lambda *args: (_ for _ in ()).throw(RuntimeError("GPU went away"))
    probe = backend.probe()
    assert probe.available and backend.tiles.config == tiling.METAL_LARGE
    assert "the tile timing failed (RuntimeError: GPU went away)" in probe.reason


def test_forced_tile(monkeypatch):
    monkeypatch.setenv(metal_tiles.TILE_ENV, "metal_128x128_8sg")
    backend = fake_m5()
    probe = backend.probe()
    assert probe.available and backend.tiles.config == tiling.METAL_WIDE8 and "forced" in probe.reason
    monkeypatch.setenv(metal_tiles.TILE_ENV, "metal_1x1")
    backend = fake_m5()
    probe = backend.probe()
    assert not probe.available and "INT8NAX_METAL_TILE: unknown tile 'metal_1x1'" in probe.reason
    assert FakeOps.built  # the variant was still self-tested


def test_time_tiles_leaves_a_wrong_candidate_out():
    """A recorder's kernels return zeros: no candidate matches the exact reference, so none is
    timed (and choose_tile would keep METAL_LARGE)."""
    kernels = metal_kernel_set.KernelSet(RecordingFactory())
    got = metal_timing.time_tiles(kernels, metal_source.KernelVariant(), "s", tiling.METAL_LARGE_CANDIDATES, shape=(70, 64, 40))
    assert got == {n: "not exact at the timing shape: left out" for n in NAMES}


IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.mark.skipif(shim.GXX is None and not IN_CI, reason="g++ is not installed: the Metal shim cannot be built")
@pytest.mark.parametrize("variant", [metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT), metal_source.KernelVariant(metal_source.LOAD_GENERIC)],
                         ids=lambda v: v.load)
def test_time_tiles_on_the_stand_in_times_every_candidate(variant):
    """The timing function on the real sources (g++ stand-in): every candidate builds, is exact
    against the reference at the timing shape, and is timed; a budget of 0 times only the first."""
    factory = mlx_stand_in.StandInFactory(emu.mlx_float_layout())
    shape = (130, 300, 72)
    metal_timing.time_tiles(metal_kernel_set.KernelSet(factory), variant, "s", tiling.METAL_LARGE_CANDIDATES, shape, repeat=1)
    factory.build()
    # the stand-in runs every thread on a CPU: a budget far above the GPU's 0.3 s
    got = metal_timing.time_tiles(metal_kernel_set.KernelSet(factory), variant, "s", tiling.METAL_LARGE_CANDIDATES, shape, repeat=1,
                           budget=600)
    assert set(got) == set(NAMES) and all(isinstance(v, float) and v > 0 for v in got.values()), got
    got = metal_timing.time_tiles(metal_kernel_set.KernelSet(factory), variant, "s", tiling.METAL_LARGE_CANDIDATES, shape, repeat=1,
                           budget=0)
    assert isinstance(got["metal_128x128"], float)
    assert got["metal_64x128"] == got["metal_128x128_8sg"] == "not timed: the 0 s budget was spent"


def test_selftest_reports_the_tile_choice(monkeypatch, tmp_path):
    from int8nax.commands import selftest

    monkeypatch.setenv(backend_cache.CACHE_ENV, str(tmp_path))
    backend = fake_m5()
    backend._tile_timer = lambda kernels, variant, gpu, candidates: {c.name: SECONDS[c.name] for c in candidates}

    class Probe:
        def __call__(self, **call):
            return [mx.array(np.zeros(len(metal_launch.SUBNORMAL_PROBE_OPS), np.float32))]

    backend.kernels = metal_kernel_set.KernelSet(lambda **spec: Probe())
    monkeypatch.setattr(metal, "BACKEND", backend)
    section = selftest.metal_section([1, 7])
    tiles = section["tiles"]
    assert tiles["tile"] == "metal_64x128" and tiles["source"] == "measured"
    assert tiles["timings_ms"]["metal_128x128"] == pytest.approx(1.6) and tiles["shape"] == list(metal_tiles.TUNE_SHAPE)
    text = "\n".join(selftest.render_metal(section))
    assert "- tile for M > 64: metal_64x128" in text and "metal_128x128 1.600 ms" in text
    assert section["decode"]["kernel"].startswith("metal w8a8 decode (M <= 4, x quantized in registers")
    assert "- decode path: metal w8a8 decode" in text and "cider linear (w8a8)" in text
