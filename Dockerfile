# Sonate Trust Proxy: slim, non-root, with a health check. It holds the serving dependencies only
# (requirements-serve.lock: ONNX Runtime and the shipped MiniLM graph, no torch); the detoxify
# model needs the `detoxify` extra and is not in the image.
# BASE: any Debian-based image with Python 3.11 and its venv module. `make image-test` builds from
# a Debian root filesystem made with debootstrap (scripts/image-test.sh), where no image registry
# is reachable.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements-serve.lock ./
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes --only-binary :all: -r requirements-serve.lock
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN /opt/venv/bin/pip install --no-deps --no-build-isolation . && /opt/venv/bin/pip check

FROM ${BASE}
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 SONATE_CONFIG=/app/config.yaml \
    LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1
RUN useradd --system --uid 10001 --home /app sonate
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The image's config reads every key from the environment (SONATE_CLIENT_KEY, SONATE_ADMIN_KEY,
# SONATE_METRICS_KEY) and holds no secret; the repository's config.yaml, with the published demo
# keys, is not copied: `sonate serve` refuses them on 0.0.0.0 anyway. Mount your own config and
# set SONATE_CONFIG to replace it (docs/operations.md "Keys and exposure").
COPY deploy/config.container.yaml ./config.yaml
COPY policies ./policies
RUN mkdir -p /app/var && chown sonate /app/var
USER sonate
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=90s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2).status != 200)"
CMD ["sonate", "serve", "--host", "0.0.0.0"]
