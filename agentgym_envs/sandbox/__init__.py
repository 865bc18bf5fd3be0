"""The sandbox: where untrusted code runs.

Execution backends (bubblewrap, Docker), episode workspaces, the Python runtime the
sandbox sees and the test runner. RepoFix, the env built on it, is
:mod:`agentgym_envs.repofix`.
"""
