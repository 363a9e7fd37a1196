"""Every code block of README.md and docs/*.md runs, and every output block is what it shows.

Each page runs in a working directory of its own, block by block, in order:

- ```python: executed in one Python process per page, so a block continues the ones before
  it. A block whose first line is `# NAME.py: ...` is written to NAME.py instead, for a
  command to run.
- ```sh: each command runs in bash, `npbert` and `python` being this interpreter's. A
  command must exit 0, or the status its comment names (`# exit 1`).
- ```text: what the block before printed (the last command of a sh block, the stdout of a
  python block); all of it, or where a line is `...`, the lines shown, in order.

Placeholders: M (in commands) and "path/to/checkpoint" stand for all-MiniLM-L6-v2's
directory, which outputs show as M; `tests/data/` is this repository's; the Hub is the fake
one of tests/fake_hub.py on 127.0.0.1, serving all-MiniLM-L6-v2 as
sentence-transformers/all-MiniLM-L6-v2, with HF_HOME (shown as ~/.cache/huggingface) in the
working directory; `<commit>` in an output stands for any commit sha. The working
directory starts with the files the pages name as given (WORKSPACE). README's set-up
commands are .ci/run's (tests/test_readme.py); the install lines elsewhere must be theirs.
"""

import json
import os
import re
import select
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fake_hub import FakeHub, serve

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
SLOW = {  # pages over a few seconds: Ray starts in 10 to 20 s on two cores, twice
    "docs/ray.md",
    "docs/cli.md",
    "docs/corpora.md",
    "docs/hub.md",
    "docs/positions.md",
    "docs/verifying.md",
}
HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COMMAND_LIMIT = 120  # seconds any one command or block may take
INSTALL = re.compile(r"(python3? -m venv|pip install)\b")
ACTIVATE = ". .venv/bin/activate"
IDS = [[101, 1045, 2572, 8254, 2319, 102]]  # [CLS] i am sin ##an [SEP]
TEXTS = ["I am Sinan", "this is a test sentence", "The quick brown fox jumps over the lazy dog"]


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, from 1
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"


def blocks(page: str) -> list[Block]:
    found, lines = [], (ROOT / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang = i, lines[i][3:].strip()
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            found.append(Block(page, start + 1, lang, "\n".join(lines[start + 1 : i]) + "\n"))
        i += 1
    return found


def setup_section_blocks() -> list[Block]:
    """README's "## Set up" blocks: CI runs them (tests/test_readme.py)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Set up\n")
    end = text.find("\n## ", start + 1)
    first = text[:start].count("\n") + 2
    last = text[: end if end > 0 else len(text)].count("\n") + 1
    return [b for b in blocks("README.md") if first <= b.line <= last]


def commands(block: Block) -> list[tuple[int, str]]:
    """(line, command) of a sh block: lines joined at a trailing backslash, comments and
    blank lines left out."""
    found, pending, first = [], "", 0
    for offset, line in enumerate(block.text.splitlines(), start=block.line + 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        first = first if pending else offset
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        found.append((first, pending + line))
        pending = ""
    assert not pending, f"{block}: a command ends in a backslash"
    return found


def expected_status(command: str) -> int:
    match = re.search(r"#\s*exit (\d+)\b", command)
    return int(match[1]) if match else 0


# The Python process that runs a page's python blocks: it reads a block (JSON, one line) from
# fd IN, runs it in one namespace with stdout captured, and answers on fd OUT.
WORKER = """
import contextlib, io, json, os, sys, traceback
commands, answers = os.fdopen(int(sys.argv[1])), os.fdopen(int(sys.argv[2]), "w")
namespace = {"__name__": "__main__"}
for line in commands:
    block = json.loads(line)
    out, error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block["code"], block["name"], "exec"), namespace)
    except BaseException:
        error = traceback.format_exc()
    answers.write(json.dumps({"stdout": out.getvalue(), "error": error}) + "\\n")
    answers.flush()
"""


class Python:
    """One page's Python process."""

    def __init__(self, cwd: Path, env: dict):
        to_worker, self.commands = os.pipe()
        self.answers, from_worker = os.pipe()
        self.log = open(cwd.parent / "python.log", "w")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(to_worker), str(from_worker)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(to_worker, from_worker),
        )
        os.close(to_worker)
        os.close(from_worker)
        self.buffer = b""

    def run(self, code: str, name: str) -> tuple[str, str | None]:
        os.write(self.commands, (json.dumps({"code": code, "name": name}) + "\n").encode())
        deadline = time.monotonic() + COMMAND_LIMIT
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise AssertionError(f"{name}: no answer within {COMMAND_LIMIT} s")
            chunk = os.read(self.answers, 1 << 16)
            if not chunk:
                raise AssertionError(f"{name}: the Python process ended: {self.output()}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer = json.loads(line)
        return answer["stdout"], answer["error"]

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def close(self) -> None:
        os.close(self.commands)
        try:
            self.process.wait(timeout=COMMAND_LIMIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.answers)
        self.log.close()


@pytest.fixture(scope="module")
def hub(minilm_dir):
    fake = FakeHub()
    fake.add(HUB_MODEL, minilm_dir, tags=["v1.0"])
    server = serve(fake)
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    """`npbert`, `python` and `python3`: this interpreter's, ahead of anything on PATH."""
    directory = tmp_path_factory.mktemp("bin")
    scripts = {
        "npbert": f'exec {shlex.quote(sys.executable)} -m npbert "$@"\n',
        "python": f'exec {shlex.quote(sys.executable)} "$@"\n',
    }
    scripts["python3"] = scripts["python"]
    for name, body in scripts.items():
        (directory / name).write_text("#!/bin/sh\n" + body)
        (directory / name).chmod(0o755)
    return directory


def workspace(directory: Path, minilm_dir: Path) -> None:
    """The files the pages take as given: ids.npy and a port's output for them, mine.npy;
    corpus.txt (one text a line), corpus.jsonl, corpus.parquet and a directory of all three,
    corpus/."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import npbert

    np.save(directory / "ids.npy", np.array(IDS))
    weights = npbert.load_weights(minilm_dir)
    reference = npbert.embed(weights, np.array(IDS), dtype=np.float64)
    np.save(directory / "mine.npy", reference.astype(np.float32))
    pairs = [("Who is Sinan?", "Sinan wrote a notebook."), ("I am Sinan", None)]
    lines = [json.dumps({"text": t} | ({"pair": p} if p else {})) for t, p in pairs]
    (directory / "corpus").mkdir()
    for place in (directory, directory / "corpus"):
        (place / "corpus.txt").write_text("".join(t + "\n" for t in TEXTS))
        (place / "corpus.jsonl").write_text("".join(line + "\n" for line in lines))
        table = pa.table({"text": [t for t, _ in pairs], "pair": [p for _, p in pairs]})
        pq.write_table(table, place / "corpus.parquet")


def environment(bin_dir: Path, home: Path, endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TQDM_", "RAY_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        HF_ENDPOINT=endpoint,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # a Ray node listens on 127.0.0.1 only
        COLUMNS="100",
    )
    return env


def substituted(code: str, minilm_dir: Path, lang: str) -> str:
    code = code.replace("path/to/checkpoint", str(minilm_dir))
    code = re.sub(r"(?<![\w/.-])tests/(data|golden)/", f"{ROOT}/tests/\\1/", code)
    if lang == "sh":
        code = re.sub(r"(?<![\w$./-])M(?![\w/.-])", shlex.quote(str(minilm_dir)), code)
    return code


def normalized(output: str, minilm_dir: Path, home: Path, endpoint: str, work: Path) -> str:
    for actual, shown in (
        (str(minilm_dir), "M"),
        (str(home), "~/.cache/huggingface"),
        (endpoint, "https://huggingface.co"),
        (f"{ROOT}/tests/", "tests/"),
        (f"{work}/", ""),
    ):
        output = output.replace(actual, shown)
    return output


def check_output(block: Block, output: str) -> None:
    """The block is the output, or where a line is `...`, its lines appear in it in order."""

    def pattern(line: str) -> re.Pattern:
        parts = re.split(r"(<commit>)", line.rstrip())
        return re.compile(
            "".join("[0-9a-f]{40}" if p == "<commit>" else re.escape(p) for p in parts)
        )

    shown = block.text.splitlines()
    actual = [line.rstrip() for line in output.splitlines()]
    if "..." not in shown:
        assert len(shown) == len(actual) and all(
            pattern(s).fullmatch(a) for s, a in zip(shown, actual, strict=True)
        ), f"{block} is not what the command printed:\n{output}"
        return
    at = 0
    for line in (s for s in shown if s != "..."):
        while at < len(actual) and not pattern(line).fullmatch(actual[at]):
            at += 1
        assert at < len(actual), f"{block}: {line!r} not printed (in this order):\n{output}"
        at += 1


def install_lines() -> set[str]:
    """The set-up commands' parts, as a reader would type them in an activated venv."""
    parts = set()
    for block in setup_section_blocks():
        for part in block.text.strip().split(" && "):
            parts.add(re.sub(r"\.venv/bin/| -q\b", "", part).strip())
    return parts


def run_page(page, tmp_path, minilm_dir, hub, bin_dir):
    work, home = tmp_path / "work", tmp_path / "hf"
    work.mkdir()
    workspace(work, minilm_dir)
    env = environment(bin_dir, home, hub)
    skip = {b.line for b in setup_section_blocks()} if page == "README.md" else set()
    python, output, source = None, None, None
    try:
        for block in blocks(page):
            if block.line in skip:
                continue
            if block.lang == "text":
                assert source is not None, f"{block} follows no block whose output it shows"
                check_output(block, normalized(output, minilm_dir, home, hub, work))
                source = None
                continue
            if block.lang == "python":
                first = block.text.splitlines()[0]
                if match := re.fullmatch(r"# ([\w-]+\.py): .+", first):
                    (work / match[1]).write_text(substituted(block.text, minilm_dir, "python"))
                    source = None
                    continue
                if python is None:
                    python = Python(work, env)
                code = substituted(block.text, minilm_dir, "python")
                output, error = python.run(code, str(block))
                assert error is None, f"{block} failed:\n{error}\n{python.output()}"
                source = block
                continue
            assert block.lang == "sh", f"{block}: a block is python, sh or text"
            for line, command in commands(block):
                if INSTALL.match(command):
                    parts = command.split("#")[0].strip().split(" && ")
                    assert all(p in {*install_lines(), ACTIVATE} for p in parts), (
                        f"{page}:{line}: an install that is not one of the set-up commands'"
                    )
                    continue
                started = time.monotonic()
                result = subprocess.run(
                    ["bash", "-c", substituted(command, minilm_dir, "sh")],
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=COMMAND_LIMIT,
                    check=False,
                )
                output = result.stdout
                assert result.returncode == expected_status(command), (
                    f"{page}:{line}: `{command}` exited {result.returncode} "
                    f"after {time.monotonic() - started:.1f} s:\n{output}"
                )
                assert "Traceback" not in output, f"{page}:{line}: `{command}`:\n{output}"
            source = block
    finally:
        if python is not None:
            python.close()


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p for p in PAGES]
)
def test_every_block_runs_and_every_output_is_shown_as_printed(
    page, tmp_path, minilm_dir, hub, bin_dir
):
    run_page(page, tmp_path, minilm_dir, hub, bin_dir)


def test_every_block_is_python_sh_or_text_and_an_output_follows_what_prints_it():
    for page in PAGES:
        fenced = False
        for number, line in enumerate((ROOT / page).read_text().splitlines(), start=1):
            fenced ^= line.startswith("```")
            # An indented fence or code block would escape the blocks run here.
            assert fenced or not re.match(r"( {4,}|\t|\s+```)", line), (
                f"{page}:{number}: an indented code block; fence it at the margin"
            )
        previous = None
        for block in blocks(page):
            assert block.lang in ("python", "sh", "text"), f"{block}: no language, or another"
            if block.lang == "text":
                assert previous is not None and previous.lang in ("python", "sh"), (
                    f"{block}: an output block must follow the block that prints it"
                )
            previous = block


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_links_between_pages_and_to_files_lead_somewhere():
    for page in PAGES:
        text = (ROOT / page).read_text()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path = (ROOT / page).parent / target if target else ROOT / page
            assert path.exists(), f"{page}: the link to {target} leads nowhere"
            assert not anchor or anchor in anchors(path), f"{page}: no #{anchor} in {target}"


def family_table(page: str) -> str:
    text = (ROOT / page).read_text()
    start = text.index("| model_type |")
    return text[start : text.index("\n\n", start)]


def test_the_family_table_is_one_table_of_the_families_npbert_has():
    from npbert.layer.families import FAMILIES, REFUSED

    table = family_table("README.md")
    assert table == family_table("docs/layer.md")
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    assert sorted(t for row in rows for t in re.findall(r"`([^`]+)`", row)) == sorted(FAMILIES)
    layer = (ROOT / "docs" / "layer.md").read_text()
    assert all(f"`{name}`" in layer for name in REFUSED)
