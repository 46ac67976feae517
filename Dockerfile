# murmur-gateway: multi-stage build, slim Python, non-root, tini as PID 1.
# The ring lives in /dev/shm: a 64 MiB arena plus 33 KiB of slots and headers (shm/ring.py),
# and a few KiB of metric counters. Docker's and podman's default /dev/shm is 64 MiB, too
# small for both, so run with --shm-size=128m or more (compose: shm_size; Kubernetes: a
# memory-backed emptyDir, deploy/kubernetes/).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY shm ./shm
# pip and setuptools are build tools: the runtime venv drops them (about 25 MB).
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM python:3.11-slim
# tini: the gateway's supervisor reaps its own children, but a process orphaned inside the
# container (a `docker exec` that backgrounds one) is re-parented to PID 1 and would stay a
# zombie under it; tini reaps those and passes SIGTERM/SIGINT on to the supervisor.
RUN apt-get update && apt-get install -y --no-install-recommends tini \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
    && groupadd --system --gid 10001 murgw \
    && useradd --system --uid 10001 --gid 10001 --no-create-home murgw
COPY --from=build /opt/venv /opt/venv
# The control socket goes to TMPDIR (/tmp): with a read-only root, mount a tmpfs there.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MUR_GATEWAY_BIND=0.0.0.0:52222 \
    MUR_GATEWAY_METRICS_BIND=0.0.0.0:9464
USER 10001:10001
EXPOSE 52222 9464
# Probes the port MUR_GATEWAY_BIND names (gateway/healthcheck.py); keep it in docker format.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-m", "gateway.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "mur-gateway"]
