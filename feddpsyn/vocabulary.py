"""One vocabulary for the command line: an option that means the same thing on several
commands has one name and one help text, written here once. ``feddpsyn.cli.command`` gives
every option left without a help of its own the text of its name here; an option this does
not know and that says nothing is a test failure (``tests/project/test_cli_reference.py``),
so every option is explained.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VOCABULARY", "explain"]

VOCABULARY: dict[str, str] = {
    "--epsilon": "the privacy budget eps (> 0); several, comma-separated, where a command "
                 "runs several",
    "--delta": "the privacy budget's delta, in (0, 1)",
    "--host": "the address to listen on (a loopback one unless the server is behind a "
              "firewall that admits only its peers)",
    "--port": "the TCP port to listen on",
    "--log-level": "debug | info | warning | error",
    "--state-dir": "the folder this program keeps its state in (created if missing; keep it "
                   "private)",
    "--csv": "the table, as CSV with a header row",
    "--schema": "the table's schema (JSON: see `feddpsyn schema draft`)",
    "--on-invalid": "what to do with a value the schema does not allow: error (stop, naming "
                    "row and column) | clamp (to the nearest bound) | drop (the row)",
    "--token-file": "the file holding this owner's token, from the operator (mode 0600)",
    "--operator-token-file": "the key server's STATE_DIR/operator.token",
    "--release": "a session's release document (JSON, from `feddpsyn client release`)",
    "--rows": "how many synthetic rows to write (default: as many as the table's)",
    "--json": "print JSON instead of text",
    "--repeats": "runs of each setting, with different seeds",
    "--parameter-set": "the cryptographic parameter set: default (any table), or a "
                       "test set (test-small: tiny circuits, for tests only)",
    "--ssl-certfile": "serve HTTPS with this certificate (PEM)",
    "--ssl-keyfile": "the certificate's private key (PEM)",
    "--mpc-tls-ca": "the CA (PEM) the three parties' MPC channels verify each other with",
    "--mpc-tls-cert": "this party's certificate for its MPC channels (PEM)",
    "--mpc-tls-key": "that certificate's private key (PEM)",
    "--party": "which of the three DistAIM servers this is: 1, 2 or 3",
    "--session-dir": "the session's folder at this server (the plan and the shares)",
}

# Where one name reads better per command, the command's own text.
_BY_COMMAND: dict[tuple[str, str], str] = {
    ("feddpsyn synthesize", "--out"): "the synthetic table to write (CSV)",
    ("feddpsyn synthesize", "--seed"): "the seed of the synthesis's sampling "
                                        "(post-processing of the release)",
    ("feddpsyn demo", "--seed"): "the seed of the table's split over the owners and of the "
                                  "synthesis; the servers' noise comes from the operating "
                                  "system's CSPRNG, never from a seed",
    ("feddpsyn bench utility", "--seed"): "the first seed of the benchmark's runs (research "
                                           "simulations, not a deployment's noise)",
    ("feddpsyn client counts", "--out"): "where to write the counts (JSON; they stay on this "
                                         "machine)",
    ("feddpsyn client release", "--out"): "where to write the release document (JSON)",
    ("feddpsyn bench utility", "--out"): "the folder the results, summary and plots go to",
    ("feddpsyn distaim party", "--out"): "where this party writes its result",
    ("feddpsyn distaim session result", "--out"): "where to write the release (JSON)",
}


def explain(command: Any, path: str) -> list[str]:
    """Give each option of ``command`` (a click command) without help its vocabulary text;
    return the names of those the vocabulary does not know."""
    unknown = []
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") != "option" or getattr(param, "help", None):
            continue
        name = max(param.opts, key=len)
        text = _BY_COMMAND.get((path, name), VOCABULARY.get(name))
        if text is None:
            if name != "--help":
                unknown.append(f"{path} {name}")
            continue
        param.help = text
    return unknown
