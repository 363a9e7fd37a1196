"""What the package declares: its version, license, author, classifiers and type hints, as
the installed distribution (built by the same backend as the wheel) reports them."""

import ast
import importlib.metadata
import importlib.resources
import re
import sys
from pathlib import Path

import npbert

ROOT = Path(__file__).resolve().parent.parent


def test_metadata_names_the_license_author_and_classifiers():
    distribution = importlib.metadata.distribution("npbert")
    meta = distribution.metadata
    assert distribution.version == npbert.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Author"] == "The npbert developers"
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3" in classifiers
    assert meta.get_all("License-File") == ["LICENSE"]  # shipped in the wheel's dist-info


def test_license_file_is_the_apache_license():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_package_is_typed():
    assert (importlib.resources.files("npbert") / "py.typed").is_file()
    assert "py.typed" in (ROOT / "pyproject.toml").read_text()  # shipped as package data


# Imported only as part of the package that brings them: urllib3 where huggingface_hub's HTTP
# client is requests (0.x; npbert.loading.ranges), PIL for matplotlib's images
# (npbert.analysis.figures), pyarrow for Parquet input, which npbert[ray] brings (Ray
# Data needs it; npbert.stream.parquet).
BROUGHT = {"urllib3": "huggingface_hub", "PIL": "matplotlib", "pyarrow": "ray"}
OPTIONAL_MODULES = {  # of the extras
    "ray/cluster.py",
    "stream/parquet.py",
    "analysis/figures.py",
    "analysis/positions_plot.py",
    "analysis/explain_plot.py",
}


def test_every_package_npbert_imports_is_declared():
    """Each third-party module npbert imports (anywhere, lazily too) comes from a distribution
    the package requires: at run time, or in an extra for the modules of its optional uses."""
    declared = {}  # distribution -> the extras that require it ("" for run time)
    for requirement in importlib.metadata.requires("npbert"):
        name, _, marker = requirement.partition(";")
        extra = re.search(r"extra == ['\"]([\w-]+)['\"]", marker)
        declared.setdefault(_normalize(re.split(r"[\[<>=!~ ]", name)[0]), set()).add(
            extra[1] if extra else ""
        )
    distributions = importlib.metadata.packages_distributions()
    for module, files in _third_party_imports().items():
        names = {_normalize(name) for name in distributions[BROUGHT.get(module, module)]}
        extras = set().union(*(declared.get(name, set()) for name in names))
        assert extras, f"{module} (imported in {sorted(files)}) is not declared in pyproject.toml"
        assert "" in extras or files <= OPTIONAL_MODULES, (module, sorted(files), extras)


def _third_party_imports() -> dict[str, set[str]]:
    """{top-level module: the npbert files that import it}, stdlib left out."""
    found = {}
    for path in (ROOT / "npbert").glob("**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for top in {module.partition(".")[0] for module in modules}:
                if top not in sys.stdlib_module_names and top != "npbert":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT / "npbert")))
    return found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_export_is_importable_from_the_package():
    assert sorted(npbert.__all__) == sorted(
        name
        for name in dir(npbert)
        if (not name.startswith("_") and name[0].isupper())
        or name in {"embed", "embed_stages", "load_weights"}
    )
    for name in npbert.__all__:
        assert getattr(npbert, name).__module__.startswith("npbert.")


# What each part of the package may import of npbert: nothing above it, so that the layer can
# be read (and lifted) alone, and no cycle. The root modules (errors, atomic) serve every part.
LAYERS = {
    "layer": {"layer"},
    "loading": {"layer", "loading"},
    "model": {"layer", "loading"},
    "embedder": {"layer", "loading", "model"},
    "stream": {"layer", "loading", "model", "embedder", "stream"},
    "ray": {"layer", "loading", "model", "embedder", "stream", "ray"},
    "verify": {"layer", "loading", "model", "embedder", "verify"},
    "analysis": {"layer", "loading", "model", "embedder", "verify", "analysis"},
}
SHARED = {"errors", "atomic"}


def test_no_part_of_the_package_imports_one_above_it():
    for path in (ROOT / "npbert").glob("**/*.py"):
        part = path.relative_to(ROOT / "npbert").parts[0].removesuffix(".py")
        if part not in LAYERS:
            continue  # the CLI, the entry point and the exports: on top of everything
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                pieces = name.split(".")
                if pieces[0] != "npbert" or len(pieces) < 2:
                    continue
                assert pieces[1] in LAYERS[part] | SHARED, f"{path.name} imports {name}"


OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]{2,}")


def test_the_library_names_no_command_line_option():
    """Library messages name the caller's arguments in braces ({resume=True}), which the CLI
    spells as its options (npbert.cli.errors.OPTIONS): a Python caller is not told to pass
    --resume. Docstrings may describe the command."""
    found = []
    for path in (ROOT / "npbert").glob("**/*.py"):
        if path.relative_to(ROOT / "npbert").parts[0] in ("cli", "__main__.py"):
            continue
        tree = ast.parse(path.read_text())
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr)
        }  # fmt: skip
        strings = (n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docs)
        for node in strings:
            if isinstance(node.value, str) and OPTION.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found
