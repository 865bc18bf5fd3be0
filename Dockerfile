# agentgym-envs with every extra, Debian chromium (web env) and bubblewrap (repo sandbox).
#   docker build -t agentgym .
#   docker run --rm agentgym list
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium bubblewrap git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/agentgym
COPY pyproject.toml README.md ./
COPY agentgym_envs ./agentgym_envs
COPY trainers ./trainers
COPY tasks ./tasks

# CPU torch by default; pass --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 for CUDA
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX" "torch>=2.4" \
    && pip install ".[all]"

RUN useradd --create-home agent
USER agent
WORKDIR /home/agent
ENTRYPOINT ["agentgym"]
CMD ["list"]
