"""What environments are built from, none of them in particular (issue 44: out of BugFix's
package): the bug families and the functions they are injected into (families.py) and their
task names (naming.py), the test harness that really runs a listing against drawn cases
(harness.py), the exploit detector (exploits.py), identifiers in shared pieces (words.py), and
any environment as a Gymnasium env in text (gymnasium_env.py). BugFix (arl.bugfix) and CodeFix
(arl.codefix) import these; this package imports no environment."""
