"""Record a fixed asv machine name, with every field filled, in ~/.asv-machine.json.

Why: a CI runner's hostname is not a stable identity, and `asv machine --machine NAME --yes`
stores only the fields passed on its command line and drops the rest (checked with asv 0.6.6).
So this script takes asv's own detected defaults (os, arch, cpu, num_cpu, ram), replaces the
name, and adds a `gpu` field, which asv copies into results/<machine>/machine.json and the
published site offers as a selector.

usage: python .github/scripts/asv_machine.py --name int8nax-cuda [--gpu "NVIDIA H200"] [--keep FILE]

--keep .asv/results/<name>/machine.json: where that committed description exists, its fields
replace the detected ones (the differences are printed). A lent VM of one kind reports its own
kernel build and a slightly different RAM size each time, and asv's site draws every combination
of machine parameters as a series of its own: one machine, one description.

Needs asv importable (run it with the interpreter of the venv that holds asv).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
from pathlib import Path


def detect_gpu() -> str:
    """A one-line description of the GPU: NVIDIA's name via nvidia-smi, or the Apple chip."""
    if shutil.which("nvidia-smi"):
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        names = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0 and names:
            return names[0] if len(set(names)) == 1 else ", ".join(names)
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        result = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=False
        )
        chip = result.stdout.strip()
        if result.returncode == 0 and chip:
            return f"{chip} GPU"
    return "none"


def machine_info(name: str, gpu: str) -> dict[str, str]:
    """asv's detected machine fields under the fixed `name`, plus `gpu`."""
    from asv.machine import Machine

    info = dict(Machine.get_defaults())
    info["machine"] = name
    info["gpu"] = gpu
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the fixed asv machine name")
    parser.add_argument("--gpu", default=None, help="GPU description (default: detected)")
    parser.add_argument("--keep", default=None, help="a committed machine.json whose fields replace the detected ones")
    args = parser.parse_args(argv)
    if not args.name.strip() or "/" in args.name:
        parser.error(f"--name must be a non-empty name without '/', got {args.name!r}")

    from asv.machine import MachineCollection

    info = machine_info(args.name, args.gpu if args.gpu is not None else detect_gpu())
    if args.keep and Path(args.keep).is_file():
        kept = {k: v for k, v in json.loads(Path(args.keep).read_text()).items() if k not in ("version", "machine")}
        for key in sorted(k for k in kept if info.get(k) != kept[k]):
            print(f"{key}: detected {info.get(key)!r}, kept {kept[key]!r} ({args.keep})")
        info.update(kept)
    MachineCollection.save(args.name, info)
    print(f"asv machine {args.name!r} recorded in {MachineCollection.get_machine_file_path()}:")
    for key in sorted(info):
        print(f"  {key}: {info[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
