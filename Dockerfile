# syntax=docker/dockerfile:1
# cairn's image: one image for every process (api, worker, scheduler, reconciler, Flower,
# migrations); the command picks the process. See docs/deploy.md.
#
#   docker build -t cairn:0.1.0 .
#   docker run --rm cairn:0.1.0 config
#
# Build an application image FROM this one: copy your definitions and handlers in and
# point CAIRN_WORKFLOWS at them.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: a virtualenv with cairn and its extras; nothing of it but the venv ships -------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
RUN python -m venv /opt/cairn
COPY pyproject.toml README.md ./
COPY cairn ./cairn
# A regular (not editable) install: the runtime stage has no /src.
RUN /opt/cairn/bin/pip install --no-cache-dir ".[s3,flower]"

# -- runtime --------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="cairn" \
      org.opencontainers.image.description="A durable workflow engine" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/cairn/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CAIRN_HOME=/tmp/cairn \
    CAIRN_LIVENESS_FILE=/tmp/cairn-alive \
    CAIRN_CLI_PRELOAD=0
# (A command exec'd into a container runs as a process of its own: a preloaded command
# line would stay behind for a quarter of an hour, counted against the container's memory.)
# A fixed uid, so that Kubernetes' runAsNonRoot can check it without a name lookup.
RUN groupadd --system --gid 10001 cairn \
    && useradd --system --uid 10001 --gid cairn --no-create-home --home-dir /app cairn \
    && mkdir -p /app/workflows \
    && chown -R 10001:10001 /app
COPY --from=build /opt/cairn /opt/cairn
COPY docker/healthcheck.py /opt/cairn/healthcheck.py
WORKDIR /app
USER 10001:10001
# Docker's own check (Compose, `docker ps`); Kubernetes uses the probes in k8s/ instead.
# It checks whichever process the container runs: see docker/healthcheck.py.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "/opt/cairn/healthcheck.py"]
# SIGTERM is a Celery worker's warm shutdown: running nodes finish, then it exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cairn"]
CMD ["worker"]
