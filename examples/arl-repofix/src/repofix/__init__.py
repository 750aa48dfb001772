"""RepoFix: find and fix the one bug in a small multi-file Python repository. An arl
environment shipped as its own package: it registers `repofix.environment:REPOFIX` under the
`arl.environments` entry points, and arl knows it from that declaration alone (`arl check env
repofix`, `--env repofix`, "arl/RepoFix-v0").

The repository's code (a policy's edits) runs only in arl's sandbox (arl.sandbox, bubblewrap),
as CodeFix's does: the public tests on `test`, public and hidden ones on `submit`.

Modules: code (a line as words and back), sources (the repositories as written, and the bugs)
and repos (tasks, tests, expected values) import nothing of arl; grade (the sandbox jobs),
grammar, env, policies, environment and gymnasium_env are the protocol's side.
"""
