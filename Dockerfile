# murmur-gateway: multi-stage build, slim Python, non-root.
# The ring lives in /dev/shm (a 64 MiB arena plus headers): Docker's default /dev/shm is
# 64 MiB, too small, so run with --shm-size=256m (compose: shm_size).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY shm ./shm
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --no-create-home murgw
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MUR_GATEWAY_BIND=0.0.0.0:52222 \
    MUR_GATEWAY_METRICS_BIND=0.0.0.0:9464
USER murgw
EXPOSE 52222 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:52222/readyz', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["mur-gateway"]
