"""Checking another implementation against npbert, stage by stage."""
