"""The README's promises: its test command is what CI runs, its examples run (every block of
README.md and docs/*.md runs in tests/test_docs.py)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
VERIFYING = (ROOT / "docs" / "verifying.md").read_text()


def setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = setup_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    main_job, test_suite = commands
    assert "npbert embed" in main_job and "pytest" in test_suite
    assert test_suite in (ROOT / ".ci" / "run").read_text()


def test_math_module_imports_nothing_but_numpy():
    tree = ast.parse((ROOT / "npbert" / "layer" / "embedding.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"numpy"}


def test_runtime_never_imports_torch_or_transformers(minilm_dir):
    code = (
        "import sys, npbert\n"
        f"npbert.Embedder.from_pretrained({str(minilm_dir)!r})('I am Sinan')\n"
        "assert not {'torch', 'transformers'} & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_code_is_ruff_clean():
    for argv in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_worked_example_passes_compare(tmp_path, minilm_dir, monkeypatch, capsys):
    from npbert.cli import main

    port = re.search(r"```python\n(# my_port\.py: .+?)```", VERIFYING, flags=re.S)[1]
    (tmp_path / "my_port.py").write_text(port)
    monkeypatch.chdir(tmp_path)
    subprocess.run([sys.executable, "my_port.py", str(minilm_dir)], check=True)
    assert main(["compare", "mine.npy", "--model", str(minilm_dir), "--ids-file", "ids.npy"]) == 0
    printed = re.search(r"\n(  embeddings     ok .+)\n", VERIFYING)[1]  # what the page shows
    assert printed in capsys.readouterr().out.splitlines()
    check = re.search(r"```python\n(# the check in a test suite.+?)```", VERIFYING, flags=re.S)[1]
    check = check.replace("path/to/checkpoint", str(minilm_dir))
    exec(compile(check, "docs/verifying.md", "exec"), {})  # asserts it passes
    np.save("mine.npy", np.load("mine.npy") * np.float32(1.001))  # now wrong
    with pytest.raises(
        AssertionError, match="'embeddings' is the first stage given that disagrees"
    ):
        exec(compile(check, "docs/verifying.md", "exec"), {})
