"""RepoFix: fixing real repositories in an isolated sandbox (backends, workspaces, verification)."""
