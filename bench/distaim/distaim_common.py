"""What the DistAIM benchmarks share: Adult encoded with its schema (and as FLAIM's experiments
see it), the all-pairs workload, a loopback port, an MPC oracle in the one-party runtime, and
the mean +- sd summary line. The benchmarks here and the studies in experiments/distaim_mpc
import it; it is not run on its own."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from feddpsyn.demo import dataset, free_port  # noqa: E402
from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime  # noqa: E402
from feddpsyn.distaim.oracle import MpcOracle  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402


def adult(bins: int = 10) -> tuple[np.ndarray, tuple[int, ...]]:
    """Adult's records, encoded with the bundled schema (continuous columns in ``bins``
    equal-width bins between the schema's public bounds), and its domain sizes."""
    ds = dataset("adult")
    schema = Schema.load(ds.schema, default_bins=bins)
    return encode_csv(ds.csv, schema).records, tuple(schema.domain_sizes)


# private-pgm's Adult (the file FLAIM's code reads): education-num kept, education dropped,
# continuous columns cut to these many values (its adult-domain.json)
PGM_ADULT_BINS = {"age": 85, "fnlwgt": 100, "education-num": 16, "capital-gain": 100,
                  "capital-loss": 100, "hours-per-week": 99}


def adult_flaim(bins: int | None) -> tuple[np.ndarray, tuple[int, ...], list[str]]:
    """Adult as FLAIM's experiments see it: the 14 attributes of private-pgm's Adult
    (``education`` dropped: ``education-num`` is the same column in ranks), continuous
    columns in ``bins`` equal-width bins between the schema's public bounds, or with
    ``bins=None`` in private-pgm's sizes (``PGM_ADULT_BINS``). Returns records, domain
    sizes and column names."""
    import json

    ds = dataset("adult")
    raw = json.loads(Path(ds.schema).read_text())
    for column in raw["columns"]:
        if column["type"] == "continuous":
            column["bins"] = PGM_ADULT_BINS[column["name"]] if bins is None else bins
    schema = Schema.from_dict(raw)
    names = [c.name for c in schema.columns]
    keep = [i for i, n in enumerate(names) if n != "education"]
    records = encode_csv(ds.csv, schema).records[:, keep]
    return records, tuple(schema.domain_sizes[i] for i in keep), [names[i] for i in keep]


def all_pairs(d: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(d) for j in range(i + 1, d)]


def local_oracle(vector, layout, epsilon: float, **options) -> MpcOracle:
    """The servers' MPC oracle in a one-party in-process runtime, over the union ``vector``."""
    rt = local_runtime()
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    shared = None if vector is None else secint.array(secint.field.array(vector))
    return MpcOracle(rt, secint, em, shared, layout, epsilon, **options)


def summary(name: str, runs: list[dict], keys=("one_way", "two_way", "three_way")) -> str:
    """``name (n runs): key mean +- sd, ...`` over a list of metric dicts."""
    parts = []
    for key in keys:
        values = np.array([r[key] for r in runs])
        sd = values.std(ddof=1) if len(values) > 1 else float("nan")
        parts.append(f"{key} {values.mean():.4f} +- {sd:.4f}")
    return f"{name} ({len(runs)} runs): " + ", ".join(parts)


def run_as_three_parties(script: str, args, party) -> None:
    """A benchmark that is its own MPC party: with ``--pid`` (and ``--parties``) set, run
    ``party(pid, addresses, args)`` under a 30 min deadline; otherwise start the three parties
    as subprocesses of ``script`` on free loopback ports and wait (bounded) for them."""
    import subprocess

    from feddpsyn.distaim.mpc_runtime import PartyAddress, exit_after

    if args.pid is not None:
        exit_after(1800)
        addresses = [PartyAddress(h, int(p)) for h, _, p in
                     (a.rpartition(":") for a in args.parties.split(","))]
        party(args.pid, addresses, args)
        return
    parties = ",".join(f"127.0.0.1:{free_port()}" for _ in range(3))
    procs = [subprocess.Popen([sys.executable, script, *sys.argv[1:], "--pid", str(pid),
                               "--parties", parties], cwd=ROOT) for pid in range(3)]
    for proc in procs:
        proc.wait(timeout=3600)
