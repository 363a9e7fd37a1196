"""What the package declares: its version, license, author, classifiers and type hints, as
the installed distribution (built by the same backend as the wheel) reports them."""

import ast
import importlib.metadata
import importlib.resources
import re
import subprocess
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
# client is requests (0.x; npbert.ranges), PIL for matplotlib's images (npbert.positions_plot),
# pyarrow for Parquet input, which npbert[ray] brings (Ray Data needs it; npbert.sources).
BROUGHT = {"urllib3": "huggingface_hub", "PIL": "matplotlib", "pyarrow": "ray"}
OPTIONAL_MODULES = {"ray.py", "sources.py", "positions_plot.py"}  # they say which extra


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
    for path in (ROOT / "npbert").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for top in {module.partition(".")[0] for module in modules}:
                if top not in sys.stdlib_module_names and top != "npbert":
                    found.setdefault(top, set()).add(path.name)
    return found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lazy_exports_and_the_type_checkers_imports_agree():
    """npbert/__init__ names each export twice: in _EXPORTS, which __getattr__ imports from,
    and under TYPE_CHECKING, for type checkers and editors. Each must say the same module."""
    tree = ast.parse((ROOT / "npbert" / "__init__.py").read_text())
    checking = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    typed = {alias.name: node.module for node in checking.body for alias in node.names}
    assert typed == npbert._EXPORTS
    assert sorted(npbert.__all__) == sorted(typed)
    assert not hasattr(npbert, "nonesuch") and not hasattr(npbert, "ray.x")
    code = (
        "import sys, npbert; loaded = set(npbert._LOADED); npbert.model; "
        "print(sorted(m[7:] for m in sys.modules if m.startswith('npbert.')) == sorted(loaded))"
    )  # the submodules the exports bring are the ones named, no more, no fewer
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.stdout == b"True\n", result.stderr
