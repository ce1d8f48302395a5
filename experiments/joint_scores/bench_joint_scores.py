"""Benchmark: noisy-greedy's joint scores against the two-server adder, same run.

noisy-greedy noises each pair's encrypted InDif inside the session's score module
(``crypto.noisy_scores``): either the compute server's discrete Gaussian as a clear operand
(``noise``, the two-server scores: 2-bit carry lookups) or one joint noise from both servers'
XOR-shared bits (``joint``: the uniforms' columns summed, one lookup a digit, up to
``params.noise_rules.SCORE_LOOKUP_BITS`` wide). Wider lookups enlarge the whole module's
evaluation keys and slow each bootstrap; this bench measures by how much.

Sessions: the plan the servers build (``fedbench.methods.feddpsyn_served.served_plan``:
noise "auto", ``max_rows`` stated as the demo states it; delta 1e-5) for noisy-greedy on the
bundled tables: Adult at eps 0.5 / 1 / 2 and Fed-Heart-Disease at eps 1. Per session, the
score module is compiled as the key server compiles it (``keyserver.noisy_greedy``:
``compile_noisy_scores(plan.selection.noisy_shape(plan.used_chunk_sizes()),
plan.selection.p_error)``): once with the plan's joint shape, once with the same widths
and the two-server ``noise`` (``joint=None``, the plan's noise_bits), and, where the joint
shape's uniforms take two passes (``NoisyScoreShape.pass_sizes``), once more with them in one
wide carry chain (``one-pass``, the design before the passes: Fed-Heart-Disease's 28
uniforms then needed 6-bit lookups). Measured per variant:

* compile seconds (once; the order alternates between sessions, and a process's first
  compile carries a one-off warm-up, so these are indicative only);
* evaluation-key bytes (``client.evaluation_keys.serialize()``, compressed keys, as the key
  server ships them) and key-generation seconds (``client.keys.generate`` from 128-bit
  ``secrets`` seeds, as ``keyserver.keys._keys_for``), both every repeat;
* per score call (one pair's noise addition: ``server.run`` of ``noise`` or ``joint`` with the
  deserialized evaluation keys, as the compute server's executor runs it), wall and process
  CPU seconds, the first call after a key generation apart (a one-off cost of new keys,
  several times a later call's seconds); for ``joint`` also the key server's encryption of its bits a and their bytes
  (its offline work and the transfer to the compute server);
* programmable bootstraps per call, from concrete's compile statistics.

Every call's output is decrypted and checked against the plaintext model: a random score in
the plan's bound [0, 2 max_rows] (the first call of a session: the bound itself, the longest
carry chain), the compute server's N_Z(0, sigma2) draw from ``dp.discrete_gaussian``
(two-server; ``noisy_score_plaintext``, ``decode_noisy_score``) or both servers' bits from
``secrets`` (joint; ``joint_score_plaintext``, ``decode_joint_score`` against
``crypto.joint_noise.joint_noise_plaintext``); a mismatch stops the bench. Within each
repeat the variants alternate (key generation in turn, then the calls interleaved, the
order reversed every other repeat); the machine is shared, so only the ratios of one run
count (joint / two-server, joint / one-pass).

Run: echo 19 > /proc/self/autogroup; .venv/bin/python experiments/joint_scores/bench_joint_scores.py
--json experiments/joint_scores/results/joint_scores.json  [--repeats 3 --calls 3 | --quick]

One score call, decrypted and checked (``ScoreVariant``), lives in ``bench/scale/bench_scale.py``,
whose measured sample uses it too.

Measured (2 cores, quiet but for this run; 3 repeats x 3 calls, every call
exact; ``experiments/joint_scores/results/joint_scores.json``). Compressed evaluation keys of the whole score
module: 130.6 MB two-server, 130.8 MB joint with 5-bit lookups (Fed-Heart-Disease 10 x 7
uniforms, Adult eps 0.5 12 x 8 and eps 1 14 x 7: x1.00, keygen 5.4-5.7 s both, x1.00-1.06),
307.1 MB with 6-bit lookups (Adult eps 2, 16 x 6: x2.35, keygen 13.3 s against 5.5 s,
x2.41). A score call (12-17 bootstraps either way): 0.49-0.58 s joint against 0.33-0.37 s
two-server with 5-bit lookups (x1.46-1.57 wall, x2.07-2.11 CPU), 1.03 s against 0.37 s with
6-bit (x2.80 wall, x3.36 CPU); the first call with fresh keys 1.2 s two-server, 2.3-2.5 s
joint (5-bit), 5.3 s (6-bit). The key server's bits a: 1.9-2.6 KB a pair, 16 ms to encrypt.
Peak RSS 3.7 GB (Adult eps 2's keys).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.scale.bench_scale import ScoreVariant  # noqa: E402
from feddpsyn.crypto.noisy_scores import NoisyScoreShape  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DELTA = 1e-5
SESSIONS = (("fed_heart_disease", 1.0), ("adult", 0.5), ("adult", 1.0), ("adult", 2.0))
QUICK_SESSIONS = (("fed_heart_disease", 1.0),)
MAX_REPEATS, MAX_CALLS = 20, 50
VARIANTS = ("two-server", "joint", "one-pass")
# The one-pass baseline: the joint shape's uniforms in a single carry chain, as wide as they
# need (the design before the passes); compiled only where the joint shape takes two passes.
ONE_PASS_BITS = 8


@dataclass(frozen=True)
class ScoreSession:
    """The widths a served noisy-greedy session gives its score module."""

    dataset: str
    epsilon: float
    rows: int
    max_rows: int
    pairs: int
    p_error: float
    sigma2: Fraction        # the two-server scores' per-server variance
    shape: NoisyScoreShape  # with the plan's joint noise

    @property
    def label(self) -> str:
        return f"{self.dataset} eps {self.epsilon:g}"

    def variant_shape(self, name: str) -> NoisyScoreShape:
        if name == "one-pass":
            return replace(self.shape, pass_bits=ONE_PASS_BITS)
        return self.shape if name == "joint" else replace(self.shape, joint=None)

    def variants(self) -> tuple[str, ...]:
        """The variants this session compiles: the one-pass baseline where it differs."""
        return VARIANTS if len(self.shape.pass_sizes) > 1 else VARIANTS[:2]

    def facts(self) -> dict:
        joint = self.shape.joint
        return {"dataset": self.dataset, "epsilon": self.epsilon, "delta": DELTA,
                "rows": self.rows, "max_rows": self.max_rows, "pairs": self.pairs,
                "p_error": self.p_error, "count_bits": self.shape.count_bits,
                "chunk_sizes": list(self.shape.chunk_sizes),
                "score_bits": self.shape.score_bits, "noise_bits": self.shape.noise_bits,
                "two_server_sigma2": float(self.sigma2),
                "two_server_score_variance": float(2 * self.sigma2),
                "joint_uniforms": joint.uniforms, "joint_bits": joint.bits,
                "joint_score_variance": float(joint.variance)}


def served_session(dataset: str, epsilon: float) -> ScoreSession:
    """The score widths of the servers' plan for noisy-greedy on a bundled table."""
    from feddpsyn.demo import dataset as demo_dataset
    from feddpsyn.fedbench.methods.feddpsyn_served import served_plan
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.table_codec import encode_csv

    ds = demo_dataset(dataset)
    schema = Schema.load(ds.schema)
    rows = len(encode_csv(ds.csv, schema).records)
    plan = served_plan(schema, rows, epsilon, DELTA, "noisy-greedy", None)
    selection = plan.selection
    shape = selection.noisy_shape(plan.used_chunk_sizes())
    if shape.joint is None:
        raise RuntimeError(f"{dataset} at eps {epsilon}: the plan keeps the scores two-server "
                           "(nothing to compare)")
    return ScoreSession(dataset, epsilon, rows, selection.max_rows, selection.pairs,
                        selection.p_error, selection.noise_sigma2, shape)


@dataclass
class SessionResult:
    session: ScoreSession
    variants: dict[str, dict] = field(default_factory=dict)

    def record(self, variant: ScoreVariant) -> None:
        self.variants[variant.name] = {
            "function": variant.function, "lookup_bits": variant.shape.lookup_bits,
            "out_bits": variant.shape.out_bits, "bootstraps_per_call": variant.bootstraps,
            "compile_s": variant.compile_s, "keygen": [], "calls": []}


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def summarise(variants: dict[str, dict]) -> dict:
    """Per variant: the medians over repeats (keys) and calls; the ratios joint / two-server.
    ``call_s``: the calls after a repeat's first (what a session's further pairs cost);
    ``first_call_s``: each repeat's first call with fresh keys (3-5x a later call, measured:
    a one-off cost of new keys, presumably concrete expanding the compressed keys)."""
    summary = {}
    for name, data in variants.items():
        keygens, calls = data["keygen"], data["calls"]
        first = [c for c in calls if c.get("first_after_keygen")]
        later = [c for c in calls if not c.get("first_after_keygen")] or calls
        summary[name] = {
            "evaluation_key_mb": median([k["evaluation_key_bytes"] for k in keygens]) / 1e6,
            "keygen_s": median([k["keygen_s"] for k in keygens]),
            "call_s": median([c["call_s"] for c in later]),
            "call_cpu_s": median([c["call_cpu_s"] for c in later]),
            "first_call_s": median([c["call_s"] for c in first]) if first else None,
            "bootstraps_per_call": data["bootstraps_per_call"],
            "lookup_bits": data["lookup_bits"], "calls": len(calls), "repeats": len(keygens)}
    keys = ("evaluation_key_mb", "keygen_s", "call_s", "call_cpu_s", "first_call_s",
            "bootstraps_per_call")
    for base in ("two-server", "one-pass"):
        if base in summary and "joint" in summary:
            joint, other = summary["joint"], summary[base]
            summary[f"ratio_joint_over_{base.replace('-', '_')}"] = {
                key: joint[key] / other[key] for key in keys
                if joint[key] is not None and other[key] is not None}
    return summary


def _log(line: str) -> None:
    print(line, flush=True)


def compile_variants(session: ScoreSession, log=_log, reverse: bool = False
                     ) -> list[ScoreVariant]:
    """The session's score modules at its widths, as the key server compiles them (in
    VARIANTS' order, or reversed: a process's first compile carries a one-off warm-up);
    returned in VARIANTS' order."""
    variants = []
    names = session.variants()
    for name in (names[::-1] if reverse else names):  # bounded: at most three variants
        variant = ScoreVariant.compiled(name, session.variant_shape(name), session.p_error,
                                        session.sigma2)
        variants.append(variant)
        log(f"  {name}: compiled in {variant.compile_s:.1f} s "
            f"({variant.bootstraps} bootstraps a call, {variant.shape.lookup_bits}-bit lookups)")
    return sorted(variants, key=lambda v: VARIANTS.index(v.name))


def measure(session: ScoreSession, variants: list[ScoreVariant], repeats: int, calls: int,
            log=_log) -> SessionResult:
    """Keys and calls, the variants alternating (module docstring); every call checked."""
    result = SessionResult(session)
    for variant in variants:
        result.record(variant)
    bound = 2 * session.max_rows
    for repeat in range(repeats):  # bounded by MAX_REPEATS
        order = variants if repeat % 2 == 0 else variants[::-1]
        for variant in order:
            keys = variant.keygen()
            result.variants[variant.name]["keygen"].append(keys)
            log(f"  repeat {repeat + 1}: {variant.name} keys "
                f"{keys['evaluation_key_bytes'] / 1e6:.1f} MB in {keys['keygen_s']:.1f} s")
        for call in range(calls):  # bounded by MAX_CALLS
            score = bound if repeat == 0 and call == 0 else secrets.randbelow(bound + 1)
            for variant in order:
                record = variant.call(score)
                record["first_after_keygen"] = call == 0
                result.variants[variant.name]["calls"].append(record)
        log(f"  repeat {repeat + 1}: {calls} calls of each checked; peak RSS "
            f"{peak_rss_mb():.0f} MB")
    return result


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(results: list[SessionResult]) -> str:
    head = (f"{'session':24s} {'variant':10s} {'lookup':>6s} {'PBS':>4s} {'keys MB':>8s} "
            f"{'keygen s':>8s} {'call s':>7s} {'cpu s':>7s} {'1st s':>7s}")
    lines = [head, "-" * len(head)]
    for result in results:
        summary = summarise(result.variants)
        for name in result.session.variants():
            s = summary[name]
            lines.append(f"{result.session.label:24s} {name:10s} {s['lookup_bits']:6d} "
                         f"{s['bootstraps_per_call']:4d} {s['evaluation_key_mb']:8.1f} "
                         f"{s['keygen_s']:8.2f} {s['call_s']:7.2f} {s['call_cpu_s']:7.2f} "
                         f"{_number(s['first_call_s'])}")
        for label, key in (("joint/two", "ratio_joint_over_two_server"),
                           ("joint/1pass", "ratio_joint_over_one_pass")):
            if key not in summary:
                continue
            r = summary[key]
            lines.append(f"{'':24s} {label:10s} {'':6s} {r['bootstraps_per_call']:4.2f} "
                         f"{r['evaluation_key_mb']:8.2f} {r['keygen_s']:8.2f} "
                         f"{r['call_s']:7.2f} {r['call_cpu_s']:7.2f} "
                         f"{_number(r.get('first_call_s'))}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return f"{'-':>7s}" if value is None else f"{value:7.2f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="score calls per variant a repeat")
    parser.add_argument("--quick", action="store_true",
                        help="Fed-Heart-Disease only, one repeat")
    parser.add_argument("--session", action="append", default=None, metavar="DATASET:EPS",
                        help="only these sessions (repeatable), e.g. adult:2")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be in 1..{MAX_REPEATS}")
    if not 1 <= args.calls <= MAX_CALLS:
        parser.error(f"--calls must be in 1..{MAX_CALLS}")
    if args.session:
        sessions = []
        for text in args.session:
            name, _, eps = text.partition(":")
            try:
                sessions.append((name, float(eps)))
            except ValueError:
                parser.error(f"--session wants DATASET:EPS, not {text!r}")
        args.sessions = tuple(sessions)
    else:
        args.sessions = QUICK_SESSIONS if args.quick else SESSIONS
    return args


def document(args: argparse.Namespace, started: str, results: list[SessionResult],
             finished: bool) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    return {"bench": "experiments/joint_scores/bench_joint_scores.py", "argv": sys.argv[1:], "started": started,
            "finished": finished, "commit": commit, "repeats": args.repeats,
            "calls_per_repeat": args.calls, "peak_rss_mb": peak_rss_mb(),
            "sessions": [{**r.session.facts(), "variants": r.variants,
                          "summary": summarise(r.variants)} for r in results]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results = []
    for index, (dataset, epsilon) in enumerate(args.sessions):  # bounded: a fixed list
        session = served_session(dataset, epsilon)
        joint = session.shape.joint
        print(f"{session.label}: {session.rows} rows, {session.pairs} pairs, k = "
              f"{session.shape.count_bits}, chunks {session.shape.chunk_sizes}, joint "
              f"{joint.uniforms} x {joint.bits} bits (variance {float(joint.variance):.0f}) "
              f"against 2 x N_Z(0, {float(session.sigma2):.0f})", flush=True)
        variants = compile_variants(session, reverse=index % 2 == 1)
        results.append(measure(session, variants, args.repeats, args.calls))
        del variants  # this session's modules and keys, before the next session compiles
        gc.collect()
        if args.json is not None:  # after every session: a run cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            finished = index + 1 == len(args.sessions)
            args.json.write_text(json.dumps(document(args, started, results, finished),
                                            indent=1) + "\n")
    print(table(results))
    if args.json is not None:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
