"""SQLFix: repair a broken SQL query against a small in-memory sqlite3 database until it
returns the expected rows. An arl environment shipped as its own package: it registers
`sqlfix.environment:SQLFIX` under the `arl.environments` entry points, and arl knows it from
that declaration alone (`arl check env sqlfix`, `--env sqlfix`, "arl/SQLFix-v0").

No policy-written Python is executed, so no sandbox is needed: a policy writes SQL, run by
sqlite3 read-only on an in-memory database, bounded by an instruction budget (the progress
handler) and a row limit (sqlfix.grade).

Modules: data (the databases), grade (the bounded, read-only query and the comparison of rows),
tasks (families, tasks, expected rows) import nothing of arl; grammar, env, policies,
environment and gymnasium_env are the protocol's side.
"""
