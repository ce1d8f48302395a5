"""docs/deployment.md's walk-through, run as it is written: the bash block after its
``walk-through`` marker, from the repository's root, with the ports and the scratch folder
given in the environment (the block reads them from there) and this environment's
``feddpsyn`` first on the PATH. Two servers over TLS with a private CA made by openssl, the
operator, four hospitals and the release."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.ports import loopback_port

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- walk-through: tests/project/test_walkthrough.py runs this block -->"


def walkthrough() -> str:
    text = (ROOT / "docs" / "deployment.md").read_text()
    after = text[text.index(MARKER) + len(MARKER):]
    match = re.match(r"\s*```bash\n(.*?)\n```", after, re.S)
    assert match, "the walk-through's bash block follows its marker"
    return match[1]


def test_the_deployment_walkthrough_runs_as_written(tmp_path, data_dir):
    work = tmp_path / "walk"
    env = {**os.environ, "KS_PORT": str(loopback_port()), "CS_PORT": str(loopback_port()),
           "WORK": str(work), "DATA": str(data_dir / "fed_heart_disease" /
                                           "fed_heart_disease.csv"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", walkthrough()], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    logs = "".join((work / name).read_text()[-3000:] for name in ("ks.log", "cs.log")
                   if (work / name).exists())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    release = json.loads((work / "release.json").read_text())
    assert release["contributors"] == ["h0", "h1", "h2", "h3"]
    rows = (work / "synthetic.csv").read_text().splitlines()
    assert rows[0].startswith("center,age,sex") and len(rows) > 100
