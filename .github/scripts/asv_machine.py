"""Record a fixed asv machine name, with every field filled, in ~/.asv-machine.json.

Why: a CI runner's hostname is not a stable identity, and `asv machine --machine NAME --yes`
stores only the fields passed on its command line and drops the rest (checked with asv 0.6.6).
So this script takes asv's own detected defaults (os, arch, cpu, num_cpu, ram), replaces the
name, and adds a `gpu` field, which asv copies into results/<machine>/machine.json and the
published site offers as a selector.

usage: python .github/scripts/asv_machine.py --name int8nax-cuda [--gpu "NVIDIA H200"]

Needs asv importable (run it with the interpreter of the venv that holds asv).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess


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
    args = parser.parse_args(argv)
    if not args.name.strip() or "/" in args.name:
        parser.error(f"--name must be a non-empty name without '/', got {args.name!r}")

    from asv.machine import MachineCollection

    info = machine_info(args.name, args.gpu if args.gpu is not None else detect_gpu())
    MachineCollection.save(args.name, info)
    print(f"asv machine {args.name!r} recorded in {MachineCollection.get_machine_file_path()}:")
    for key in sorted(info):
        print(f"  {key}: {info[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
