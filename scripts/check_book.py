#!/usr/bin/env python3
"""The books' checks: both build with no warning, both name everything the code has, and every
link in them resolves, offline.

    python3 scripts/check_book.py path/to/slotcron [--only build,coverage,links] [--books en,zh]

- build: `mdbook build` of book/en and book/zh; any WARN or ERROR line fails it.
- coverage: every config key (each property of schema/jobs.schema.json, recursively), every CLI
  verb and flag (from the binary's own `--help` and each verb's), every environment variable
  the help names, and every metric (a replica of the binary, run against a redis-server it is
  given, scraped once on its --http-listen port) must appear, as code, in each book. Prose
  alone does not count: a key is named as `key`, `key = ...` or inside a code block.
- links: every relative link of the built HTML resolves to a file of the book and, with
  `#anchor`, to an id in it (the ids mdBook generates for headings); a link into this
  repository on GitHub (`https://github.com/slotcron/slotcron/blob/main/PATH#anchor`) must name
  a file the repository has (and a heading of it); README.md's links too, as GitHub resolves
  them. Nothing is fetched.

The mdbook binary is --mdbook PATH, else where scripts/test.sh installs the pinned one
(target/book-venv/bin/mdbook, or ~/.cargo/bin/mdbook), else `mdbook` on PATH. redis-server must be on PATH (scripts/test.sh
installs it too). Exit 0 when every check passes, 1 with every finding listed otherwise.
"""

import argparse
import html.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BOOKS = ("en", "zh")
GITHUB_BLOB = "https://github.com/slotcron/slotcron/blob/main/"
BOOK_ROOT = REPO / "book"  # --root
# How long the scraped replica may take to answer with its nodes measured: its first start on a
# loaded 2-core machine (CI builds beside it) takes seconds, not minutes.
SCRAPE_WITHIN_S = 60


def main() -> int:
    args = parse_args()
    findings: list[str] = []
    checks = set(args.only.split(","))
    books = args.books.split(",")
    global BOOK_ROOT
    BOOK_ROOT = Path(args.root)
    with tempfile.TemporaryDirectory(prefix="slotcron-book-") as tmp:
        built = {}
        if checks & {"build", "links"}:
            mdbook = find_mdbook(args.mdbook)
            for lang in books:
                built[lang] = build(mdbook, lang, Path(tmp) / lang, findings)
        if "coverage" in checks:
            check_coverage(Path(args.binary), books, findings)
        if "links" in checks:
            for lang, out in built.items():
                if out is not None:
                    check_links(lang, out, findings)
            check_readme_links(findings)
    for f in findings:
        print(f"check_book: {f}", file=sys.stderr)
    if findings:
        print(f"check_book: {len(findings)} finding(s)", file=sys.stderr)
        return 1
    print(f"check_book: {', '.join(sorted(checks))} of book(s) {', '.join(books)}: ok")
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", help="the slotcron binary (e.g. target/debug/slotcron)")
    p.add_argument("--only", default="build,coverage,links")
    p.add_argument("--books", default=",".join(BOOKS))
    p.add_argument("--mdbook", help="the mdbook binary (default: found as the doc says)")
    p.add_argument("--root", default=str(REPO / "book"),
                   help="the folder holding the books (default: book/ of this repository)")
    return p.parse_args()


# ---- build -------------------------------------------------------------------------------

def find_mdbook(given: str | None) -> str:
    candidates = [given] if given else [
        str(REPO / "target/book-venv/bin/mdbook"),
        str(Path.home() / ".cargo/bin/mdbook"),
        shutil.which("mdbook"),
    ]
    for c in candidates:
        if c and Path(c).is_file():
            return c
    sys.exit("check_book: no mdbook found (bash scripts/test.sh installs it; or pass --mdbook)")


def build(mdbook: str, lang: str, out: Path, findings: list[str]) -> Path | None:
    """Builds book/LANG into `out`; a failed build or any warning is a finding."""
    root = BOOK_ROOT / lang
    if not (root / "book.toml").is_file():
        findings.append(f"book/{lang}: no book.toml (the book is missing)")
        return None
    run = subprocess.run(
        [mdbook, "build", str(root), "--dest-dir", str(out)],
        capture_output=True, text=True, check=False,
    )
    said = (run.stdout + run.stderr).splitlines()
    warned = [l for l in said if re.search(r"\b(WARN|ERROR|warning|error)\b", l)]
    for line in warned:
        findings.append(f"book/{lang}: mdbook says: {line.strip()}")
    if run.returncode != 0:
        findings.append(f"book/{lang}: mdbook build exited {run.returncode}")
        return None
    return out


# ---- coverage ----------------------------------------------------------------------------

def check_coverage(binary: Path, books: list[str], findings: list[str]) -> None:
    wanted = {
        "config key": config_keys(),
        "CLI verb": set(),
        "CLI flag": set(),
        "environment variable": set(),
        "metric": scraped_metrics(binary),
    }
    verbs, flags, env = cli_surface(binary)
    wanted["CLI verb"] = {f"slotcron {v}" for v in verbs}
    wanted["CLI flag"] = flags
    wanted["environment variable"] = env
    for lang in books:
        code = book_code(lang)
        if code is None:
            findings.append(f"book/{lang}: no src/SUMMARY.md (the book is missing)")
            continue
        for kind, names in wanted.items():
            for name in sorted(names):
                if not named_in(name, code):
                    findings.append(f"book/{lang}: {kind} `{name}` is in the code, not in the book")


def config_keys() -> set[str]:
    """Every property name of the committed schema (`slotcron schema`, checked against the code
    by tests/it/schema.rs), at any depth."""
    schema = json.loads((REPO / "schema/jobs.schema.json").read_text())
    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            keys.update(node.get("properties", {}).keys())
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return keys


def cli_surface(binary: Path) -> tuple[set[str], set[str], set[str]]:
    """The verbs `slotcron --help` lists, and the flags and variables of it and of each verb's
    `--help` (clap's own text: what a user is shown)."""
    top = help_text(binary, [])
    verbs = set(re.findall(r"^  ([a-z][a-z-]*)  ", section(top, "Commands:"), re.M))
    verbs.discard("help")
    texts = [top] + [help_text(binary, [v]) for v in sorted(verbs)]
    flags, env = set(), set()
    for t in texts:
        opts = section(t, "Options:")
        for short, long in re.findall(r"^\s+(?:(-[A-Za-z]), )?(--[a-z][a-z-]*)", opts, re.M):
            flags.update(f for f in (short, long) if f)
        env.update(re.findall(r"\[env: ([A-Z_]+)=", t))
    return verbs, flags, env


def help_text(binary: Path, verb: list[str]) -> str:
    run = subprocess.run([str(binary), *verb, "--help"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, NO_COLOR="1"))
    return run.stdout


def section(text: str, title: str) -> str:
    """The lines of clap's help section `title`, up to the next unindented line."""
    out, inside = [], False
    for line in text.splitlines():
        if line.strip() == title:
            inside = True
            continue
        if inside and line and not line[0].isspace():
            break
        if inside:
            out.append(line)
    return "\n".join(out)


def scraped_metrics(binary: Path) -> set[str]:
    """The metric families a replica of `binary` exposes: run against a redis-server of its own
    (so the per-node series exist) with a job on the built-in calendar (so the calendar's
    does), scraped once its nodes' clocks are measured."""
    redis = shutil.which("redis-server")
    if redis is None:
        sys.exit("check_book: redis-server is not on PATH (scripts/test.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="slotcron-book-metrics-") as tmp:
        port, http = free_port(), free_port()
        server = subprocess.Popen(
            [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            config = Path(tmp) / "jobs.toml"
            config.write_text(SCRAPED_CONFIG.format(port=port))
            replica = subprocess.Popen(
                [str(binary), "run", "--config", str(config), "--replica-id", "book",
                 "--http-listen", f"127.0.0.1:{http}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=dict(os.environ, RUST_LOG="warn"))
            try:
                text = scrape_when(f"http://127.0.0.1:{http}/metrics",
                                   "slotcron_redis_node_clock_offset_seconds{")
            finally:
                replica.send_signal(signal.SIGTERM)
                replica.wait(timeout=30)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


SCRAPED_CONFIG = """\
[redis]
nodes = ["redis://127.0.0.1:{port}"]
[calendar.cn]
builtin = "cn"
[[job]]
name = "book"
schedule = "0 0 0 1 1 *"
calendar = "cn"
days = "workdays"
[job.action]
type = "log"
content = "x"
"""


def scrape_when(url: str, needle: str) -> str:
    """`url`'s body once it holds `needle` (the replica is up and has measured its nodes)."""
    deadline = time.monotonic() + SCRAPE_WITHIN_S
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                last = r.read().decode()
            if needle in last:
                return last
        except OSError:
            pass
        time.sleep(0.2)  # a replica starting: ask again shortly
    sys.exit(f"check_book: {url} did not show {needle!r} within {SCRAPE_WITHIN_S} s:\n{last}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def book_code(lang: str) -> str | None:
    """The code of book/LANG: its fenced blocks and inline `spans`, with `{{#include}}`d files
    read in, over every chapter SUMMARY.md lists."""
    src = BOOK_ROOT / lang / "src"
    summary = src / "SUMMARY.md"
    if not summary.is_file():
        return None
    chapters = re.findall(r"\]\(([^)#]+\.md)\)", summary.read_text())
    text = "\n".join(with_includes(src / c) for c in chapters if (src / c).is_file())
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", prose)
    return "\n".join(fenced + inline)


def with_includes(path: Path) -> str:
    text = path.read_text()
    return re.sub(r"\{\{#include ([^}:\s]+)[^}]*\}\}",
                  lambda m: (path.parent / m.group(1)).read_text()
                  if (path.parent / m.group(1)).is_file() else "", text)


def named_in(name: str, code: str) -> bool:
    """`name` in `code` as a whole word: `retry_count` does not count `retry_count_x`, and
    `--lang` does not count `--language`."""
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-]|\.\w)", code) is not None


# ---- links -------------------------------------------------------------------------------

class Page(html.parser.HTMLParser):
    """The ids and the link targets of one HTML page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


def check_links(lang: str, out: Path, findings: list[str]) -> None:
    pages = {}
    for f in out.rglob("*.html"):
        p = Page()
        p.feed(f.read_text())
        pages[f.resolve()] = p
    for f, page in pages.items():
        if f.name in ("print.html", "404.html", "toc.html", "index.html"):
            continue  # mdBook's own pages (index.html is the first chapter again)
        chapter = f.relative_to(out.resolve()).with_suffix(".md")
        for href in page.hrefs:
            problem = link_problem(f, href, pages)
            if problem:
                findings.append(f"book/{lang}/src/{chapter}: link {href}: {problem}")


def link_problem(page: Path, href: str, pages: dict) -> str | None:
    if href.startswith(GITHUB_BLOB):
        return repo_link_problem(href[len(GITHUB_BLOB):])
    if re.match(r"^[a-z][a-z0-9+.-]*:", href):
        return None  # another site, mailto: never fetched
    path, _, anchor = href.partition("#")
    target = (page.parent / path.split("?")[0]).resolve() if path else page
    if target.is_dir():
        target = target / "index.html"
    if not target.exists():
        return "no such file in the built book"
    if anchor and target.suffix == ".html":
        ids = pages[target].ids if target in pages else set()
        if anchor not in ids:
            return f"no heading #{anchor} in {target.name}"
    return None


def check_readme_links(findings: list[str]) -> None:
    """README.md's links, as GitHub shows the file: relative to the repository's root, an
    `#anchor` to a heading of the Markdown file it names."""
    code = False
    for n, line in enumerate((REPO / "README.md").read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            code = not code
        for href in [] if code else re.findall(r"\]\(([^)\s]+)\)", line):
            if href.startswith(GITHUB_BLOB):
                problem = repo_link_problem(href[len(GITHUB_BLOB):])
            elif re.match(r"^[a-z][a-z0-9+.-]*:", href):
                continue
            elif href.startswith("#"):
                problem = repo_link_problem("README.md" + href)
            else:
                problem = repo_link_problem(href)
            if problem:
                findings.append(f"README.md:{n}: link {href}: {problem}")


def repo_link_problem(rest: str) -> str | None:
    path, _, anchor = rest.partition("#")
    target = REPO / path
    if not target.exists():
        return f"no {path} in this repository"
    if anchor and target.suffix == ".md" and anchor not in github_anchors(target):
        return f"no heading #{anchor} in {path}"
    return None


def github_anchors(md: Path) -> set[str]:
    """The heading anchors GitHub gives a Markdown file: lower case, spaces to dashes, other
    punctuation dropped (outside code blocks)."""
    anchors, code = set(), False
    for line in md.read_text().splitlines():
        if line.lstrip().startswith("```"):
            code = not code
        m = None if code else re.match(r"^#{1,6} (.*)", line)
        if m:
            words = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(words.replace(" ", "-"))
    return anchors


if __name__ == "__main__":
    sys.exit(main())
