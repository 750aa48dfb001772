"""Helpers the sandbox tests share: a job from dedented source, and its cases' statuses."""

from __future__ import annotations

import textwrap

from arl.sandbox import Case, Job, Limits


def job(source, *cases, limits=None, files=()):
    """A job of dedented source calling f; cases as (args, expected) pairs."""
    cs = tuple(Case(f"t{i}", args, exp) for i, (args, exp) in enumerate(cases))
    return Job(textwrap.dedent(source), "f", cs, limits or Limits(), files)


def statuses(verdict):
    return [r.status for r in verdict.results]
