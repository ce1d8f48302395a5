"""The documentation stays true to the tree: docs/results.md and docs/results-archive.md are
what bench/results and experiments/ give, the README stays a short page, and every relative
link in README.md and docs/*.md reaches a file (and, into a markdown page, a heading) that
exists. Fast: no server, no circuit."""

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 150
# bench/ holds the benchmarks a user runs, helpers and the results page included; a one-off
# design study goes to experiments/<study>/, beside the decision it informed.
BENCH_MAX_SCRIPTS = 15

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6}\s+(.*?)\s*$")
FENCE = re.compile(r"^(```|~~~)")


def _results_page():
    spec = importlib.util.spec_from_file_location("results_page",
                                                  ROOT / "bench" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md",
            *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "experiments").glob("*/README.md"))]


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) for the lines outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def _headings(page: Path) -> list[str]:
    return [m.group(1) for _, line in _outside_fences(page.read_text())
            if (m := HEADING.match(line))]


def _slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for title in _headings(page):
        slug = _slug(title)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_results_pages_are_generated_from_the_kept_results():
    module = _results_page()
    for page, text in module.pages().items():
        name = page.relative_to(ROOT)
        assert page.is_file(), f"{name} is missing: run .venv/bin/python bench/results_page.py"
        assert page.read_text() == text, (
            f"{name} differs from the kept results: run .venv/bin/python bench/results_page.py")


def test_results_page_check_flag_agrees(capsys):
    assert _results_page().main(["--check"]) == 0


def test_results_page_opens_with_todays_default():
    """The first screen answers a reader: accuracy against the curator, the times with the
    machine's lookup rate, DistAIM against FLAIM and the privacy spent, before any table of
    a single file; each read from a file CURRENT names."""
    module = _results_page()
    first = (ROOT / "docs" / "results.md").read_text().splitlines()[:40]
    text = "\n".join(first)
    for label in ("**Accuracy against a trusted curator**", "**Time**", "ms a lookup",
                  "**DistAIM against FLAIM**", "**Privacy spent**"):
        assert label in text, f"{label} is not in docs/results.md's first 40 lines"
    assert not any(line.startswith("### ") for line in first)
    current = {path.relative_to(module.RESULTS).as_posix()
               for path in module.RESULTS.rglob("*.json") if module.current_rank(path) is not None}
    named = {name for names in module.HEADLINE.values() for name in names}
    assert named <= current, f"HEADLINE names files CURRENT does not: {sorted(named - current)}"
    for entry in module.CURRENT:
        assert any(module.current_rank(path) is not None
                   and module.CURRENT[module.current_rank(path)] == entry
                   for path in module.RESULTS.rglob("*")), f"CURRENT's {entry} matches no file"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/")


def test_readme_states_the_headline_figures_of_the_results():
    """The README's accuracy and time lines give the figures docs/results.md's summary reads
    from its files."""
    readme = (ROOT / "README.md").read_text()
    figures = _results_page().readme_figures()
    assert [f"{name} {value}" for name, value in figures.items() if value not in readme] == []


def test_every_relative_link_exists():
    broken = []
    for page in _pages():
        for number, line in _outside_fences(page.read_text()):
            for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path_part, _, anchor = target.partition("#")
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                resolved = (page.parent / path_part).resolve() if path_part else page
                if not resolved.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_anchor_rule_is_the_results_pages():
    # docs/results.md's table of contents uses bench/results_page.py's rule: the same as here.
    module = _results_page()
    titles = ["Private selection: `--selection em`", "Utility runs (`feddpsyn bench utility`)",
              *_headings(ROOT / "docs" / "results.md")]
    for title in titles:
        assert module.anchor(title) == _slug(title)
    assert _slug(titles[0]) == "private-selection---selection-em"


def _bench_scripts() -> list[Path]:
    """Every Python file under bench/ (its topic folders included), but the kept results."""
    bench = ROOT / "bench"
    return sorted(p for p in bench.rglob("*.py") if "results" not in p.relative_to(bench).parts)


def test_benchmarks_page_lists_every_script_and_every_method_with_its_kind():
    """docs/benchmarks.md names every script in bench/ by its path (``bench/<topic>/x.py``)
    and every registered method with the kind ``fedbench.methods.KINDS`` gives it (served
    plan, central reference, ...)."""
    from feddpsyn.fedbench.methods import KINDS, METHODS
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = [p.relative_to(ROOT).as_posix() for p in _bench_scripts()]
    assert scripts
    assert [s for s in scripts if f"`{s}" not in page] == []
    assert set(KINDS) == set(METHODS)
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| ([^|]+?) \|", page, re.M))
    assert {m: rows.get(m) for m in METHODS} == KINDS


def test_bench_holds_at_most_fifteen_scripts():
    scripts = [p.relative_to(ROOT).as_posix() for p in _bench_scripts()]
    assert 0 < len(scripts) <= BENCH_MAX_SCRIPTS, (
        f"bench/ holds {len(scripts)} Python files (at most {BENCH_MAX_SCRIPTS}): move a "
        "one-off study to experiments/<study>/ with its results and a README")


def _studies() -> list[Path]:
    return sorted(p for p in (ROOT / "experiments").iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")))


def test_every_study_has_a_readme_naming_its_scripts_and_a_command_that_runs():
    """Each experiments/ folder has a README.md that names every script of the folder, says
    which decision it informed, and gives a command whose every script exists; the study
    index (experiments/README.md) and docs/benchmarks.md list every study."""
    index = (ROOT / "experiments" / "README.md").read_text()
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    script = re.compile(r"(?:bench|experiments)/[\w/]+\.py")
    problems = []
    assert _studies()
    for study in _studies():
        readme = study / "README.md"
        if not readme.is_file():
            problems.append(f"{study.name}: no README.md")
            continue
        text = readme.read_text()
        problems += [f"{study.name}: README does not name {p.name}"
                     for p in sorted(study.rglob("*.py")) if p.name not in text]
        if "decision" not in text.lower() and "question it answered" not in text.lower():
            problems.append(f"{study.name}: README does not say which decision it informed")
        if ".venv/bin/python " not in text:
            problems.append(f"{study.name}: README gives no command")
        problems += [f"{study.name}: README names {path}, which does not exist"
                     for path in script.findall(text) if not (ROOT / path).is_file()]
        for page, name in ((index, "experiments/README.md"), (benchmarks, "docs/benchmarks.md")):
            if f"`{study.name}/`" not in page:
                problems.append(f"{study.name}: not listed in {name}")
    assert problems == []


def _recorded_commands(value):
    """Every command a kept result records (``command``, ``run``, ``bench``), at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("command", "run", "bench") and isinstance(item, str):
                yield item
            else:
                yield from _recorded_commands(item)
    elif isinstance(value, list):
        for item in value:
            yield from _recorded_commands(item)


def test_every_recorded_command_names_a_script_that_exists_or_is_historical():
    """A kept result's command names its script by the path it had when it ran; the script
    is at that path, or moved (exactly one script of that name in bench/ or experiments/,
    which the results pages name beside the command), or gone and listed in
    results_page.py's HISTORICAL with the reason."""
    module = _results_page()
    missing = []
    for folder in (module.RESULTS, module.EXPERIMENTS):
        for path in sorted(folder.rglob("*.json")):
            for command in _recorded_commands(json.loads(path.read_text())):
                missing += [f"{path.relative_to(ROOT)}: {token}"
                            for token in module.SCRIPT.findall(command)
                            if module.script_status(token)[0] == "missing"]
    assert missing == []
    assert {status for status, _ in map(module.script_status, module.HISTORICAL)} == {
        "historical"}, "a HISTORICAL script is in the tree again: drop it from the list"
    page = (ROOT / "docs" / "results-archive.md").read_text()
    assert "`bench/bench_gap_sources.py` is now `experiments/gap_sources/bench_gap_sources.py`" \
        in page


def test_bench_readme_lists_every_script_under_its_folder():
    """bench/README.md has one line a script, under the heading of the folder it is in."""
    readme = (ROOT / "bench" / "README.md").read_text()
    sections = dict(re.findall(r"^## `([a-z]+)/`[^\n]*\n(.*?)(?=^## |\Z)", readme, re.M | re.S))
    missing = []
    for path in _bench_scripts():
        parts = path.relative_to(ROOT / "bench").parts
        text = sections.get(parts[0], "") if len(parts) == 2 else readme
        if f"- `{parts[-1]}`" not in text:
            missing.append("/".join(parts))
    assert missing == []
    assert "../docs/benchmarks.md" in readme


def test_results_page_knows_results_from_before_and_after_the_topic_folders():
    """The results page recognises a file by its script's name, not its folder: the files
    kept before bench/ had topic folders record ``bench/bench_x.py``."""
    module = _results_page()
    for folder in ("bench/", "bench/accuracy/"):
        command = f"python {folder}bench_served_vs_central.py --json F"
        assert module.is_served_vs_central({"command": command})
    for folder in ("bench/", "bench/scale/"):
        assert module.is_client_stream({"run": f".venv/bin/python {folder}bench_client_stream.py"})
        assert module.is_scale({"command": f"{folder}bench_scale.py --out F", "points": []})
    for folder in ("bench/", "bench/primitives/"):
        assert module.is_joint_scores({"bench": f"{folder}bench_joint_scores.py"})
