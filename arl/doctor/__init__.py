"""`arl doctor`: read a run's metrics (arl, TRL or verl) and say what Appendix B would say.

`load_run(path)` reads a run into arl's metric names (arl/doctor/names.py holds the one
mapping table); `diagnose(run)` returns one Finding per rule that fires (a "healthy" one when
none does); `unchecked(run)` lists the rules the log cannot support and what to log for them.
"""

from arl.doctor.readers import load_run
from arl.doctor.rules import RULES, diagnose, unchecked
from arl.doctor.types import Finding, Gap, Run

__all__ = ["RULES", "Finding", "Gap", "Run", "diagnose", "load_run", "unchecked"]
