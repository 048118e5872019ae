"""Record a fixed asv machine name, with every field filled, in ~/.asv-machine.json.

Why: a CI runner's hostname is not a stable identity, and `asv machine --machine NAME --yes`
stores only the fields passed on its command line and drops the rest (checked with asv 0.6.6).
So this script takes asv's own detected defaults (os, arch, cpu, num_cpu, ram), replaces the
name, and adds a `gpu` field, which asv copies into results/<machine>/machine.json and the
published site offers as a selector.

usage: python .github/scripts/asv_machine.py --name NAME|card [--gpu "NVIDIA H200"] [--keep FILE] [--print-name]

--name card: the machine is named by the GPU (int8nax.bench.machines.card_machine: h100, h200),
so that figures of two cards never share a history; a card name given by hand must match the GPU
found (an H100's run filed as h200 is refused). --print-name prints the name and records nothing.

On an NVIDIA box the description carries the GPU (nvidia-smi's name and memory), its driver
(`gpu_driver`) and the CUDA version the driver supports (`cuda`); without nvidia-smi, MLX's
device_info() names the GPU.

--keep .asv/results/{name}/machine.json ({name}: the machine named): where that committed description exists, its fields
replace the detected ones (the differences are printed). A lent VM of one kind reports its own
kernel build and a slightly different RAM size each time, and asv's site draws every combination
of machine parameters as a series of its own: one machine, one description.

Needs asv importable (run it with the interpreter of the venv that holds asv).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
from pathlib import Path


def _nvidia_smi(*args: str) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else None


def detect_nvidia() -> dict[str, str]:
    """{"gpu", "gpu_driver", "cuda"} of the NVIDIA GPU(s) nvidia-smi reports ({} without one):
    the name (all cards' when they differ), the driver version and the CUDA version it supports."""
    out = _nvidia_smi("--query-gpu=name,driver_version", "--format=csv,noheader")
    rows = [[c.strip() for c in line.split(",")] for line in (out or "").splitlines() if line.strip()]
    if not rows:
        return {}
    names = [r[0] for r in rows]
    info = {"gpu": names[0] if len(set(names)) == 1 else ", ".join(names)}
    if len(rows[0]) > 1 and rows[0][1]:
        info["gpu_driver"] = rows[0][1]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", _nvidia_smi() or "")
    if cuda:
        info["cuda"] = cuda.group(1)
    return info


def mlx_device_name() -> str | None:
    """MLX's name for its GPU (device_info()["device_name"]), None without one or without MLX."""
    try:
        import mlx.core as mx

        if not mx.is_available(mx.gpu):
            return None
        return str(mx.device_info(mx.gpu).get("device_name") or "") or None
    except Exception:  # noqa: BLE001  (no MLX, or a build without the query: not a GPU we can name)
        return None


def detect_gpu() -> str:
    """A one-line description of the GPU: NVIDIA's name via nvidia-smi, MLX's device name, or
    the Apple chip."""
    nvidia = detect_nvidia()
    if nvidia:
        return nvidia["gpu"]
    name = mlx_device_name()
    if name:
        return name
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        result = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=False
        )
        chip = result.stdout.strip()
        if result.returncode == 0 and chip:
            return f"{chip} GPU"
    return "none"


def machine_info(name: str, gpu: str) -> dict[str, str]:
    """asv's detected machine fields under the fixed `name`, plus `gpu` (and on an NVIDIA box
    whose card is `gpu`, its driver and CUDA versions)."""
    from asv.machine import Machine

    info = dict(Machine.get_defaults())
    info["machine"] = name
    info["gpu"] = gpu
    nvidia = detect_nvidia()
    if nvidia and nvidia["gpu"] == gpu:
        info.update(nvidia)
    return info


def _machines():
    """int8nax/bench/machines.py of this script's checkout, by path: the script also names the
    machine for trees of older commits, whose int8nax has no card names (machines.py imports
    nothing of int8nax)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "src" / "int8nax" / "bench" / "machines.py"
    spec = importlib.util.spec_from_file_location("_int8nax_machines", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def card_name(gpu: str) -> str:
    """The asv machine of card `gpu` (h100, h200); SystemExit(2) naming the card otherwise."""
    machines = _machines()
    name = machines.card_machine(gpu)
    if name is None:
        raise SystemExit(f"asv_machine: --name card: no machine is named for the GPU {gpu!r} "
                         f"(known: {', '.join(machines.CARDS)}); pass --name yourself")
    return name


def resolve_name(name: str, gpu: str) -> str:
    """`name`, with "card" replaced by the GPU's machine; a card's machine name (h100, h200)
    for another GPU is refused (SystemExit 2): its figures would join another card's history."""
    machines = _machines()

    if name == "card":
        return card_name(gpu)
    if name in machines.CARDS.values() and machines.card_machine(gpu) != name:
        raise SystemExit(f"asv_machine: --name {name} is the machine of another card than this one ({gpu!r}); "
                         "use --name card")
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the fixed asv machine name, or card (h100, h200: from the GPU)")
    parser.add_argument("--gpu", default=None, help="GPU description (default: detected)")
    parser.add_argument("--keep", default=None, help="a committed machine.json whose fields replace the detected ones")
    parser.add_argument("--print-name", action="store_true", help="print the machine name and record nothing")
    args = parser.parse_args(argv)
    if not args.name.strip() or "/" in args.name:
        parser.error(f"--name must be a non-empty name without '/', got {args.name!r}")
    gpu = args.gpu if args.gpu is not None else detect_gpu()
    name = resolve_name(args.name, gpu)
    if args.print_name:
        print(name)
        return 0
    if args.keep:
        args.keep = args.keep.replace("{name}", name)

    from asv.machine import MachineCollection

    info = machine_info(name, gpu)
    if args.keep and Path(args.keep).is_file():
        kept = {k: v for k, v in json.loads(Path(args.keep).read_text()).items() if k not in ("version", "machine")}
        for key in sorted(k for k in kept if info.get(k) != kept[k]):
            print(f"{key}: detected {info.get(key)!r}, kept {kept[key]!r} ({args.keep})")
        info.update(kept)
    MachineCollection.save(name, info)
    print(f"asv machine {name!r} recorded in {MachineCollection.get_machine_file_path()}:")
    for key in sorted(info):
        print(f"  {key}: {info[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
