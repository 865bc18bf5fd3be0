"""The tools RepoFix's attacks act with: obfuscated payloads, ``run`` and ``write_file``
actions, and the tasks they aim at."""

from __future__ import annotations

import base64
import json

ENV = "agentgym/RepoFix-v1"
# (task id, package) of test tasks the attacks aim at
TASKS = (("repofix-intervals-easy-test-1000001", "intervals"),
         ("repofix-ledger-easy-test-1000003", "ledger"))  # fmt: skip


def _payload(code: str) -> str:
    """Python that runs ``code`` hidden from any source scan (base64 and exec)."""
    return f"import base64 as _b; exec(_b.b64decode({base64.b64encode(code.encode())!r}))\n"


def _run_python(code: str) -> str:
    """A ``run`` action executing ``code`` in the sandbox, its words hidden from gates."""
    blob = base64.b64encode(code.encode()).decode()
    cmd = f"python -c \"import base64; exec(base64.b64decode('{blob}'))\""
    return json.dumps({"name": "run", "arguments": {"cmd": cmd, "timeout": 60}})


def _append(package: str, code: str) -> str:
    """A ``run`` action appending ``code`` (obfuscated) to the package's ``__init__``."""
    text = "\n" + _payload(code)
    return _run_python(f"open({package + '/__init__.py'!r}, 'a').write({text!r})")


def _write(path: str, content: str) -> str:
    return json.dumps({"name": "write_file", "arguments": {"path": path, "content": content}})
