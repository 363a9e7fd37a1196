"""Checking another implementation against npbert, stage by stage: compare a candidate's arrays
with the float64 reference, say in words what a failing stage suggests, and write conformance
vectors for implementations that cannot run npbert."""

from npbert.verify.candidates import load_candidate
from npbert.verify.report import format_report
from npbert.verify.stages import compare
from npbert.verify.vectors import write_vectors

__all__ = ["compare", "format_report", "load_candidate", "write_vectors"]
