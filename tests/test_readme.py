"""The README's API example runs as written (on the CPU here)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_api_example_runs(capsys):
    text = README.read_text()
    api = text[text.index("## API"):]
    code = re.search(r"```python\n(.*?)```", api, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md (API example)", "exec"), namespace)
    assert namespace["c"].shape == (512, 1024)
    assert namespace["y"].shape == (512, 1024)
    assert namespace["n_swapped"] == 2
    assert "(512, 256)" in capsys.readouterr().out
