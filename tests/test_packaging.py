"""What the package declares: its version, license, author, classifiers and type hints, as
the installed distribution (built by the same backend as the wheel) reports them."""

import importlib.metadata
import importlib.resources
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
