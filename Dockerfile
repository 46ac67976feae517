# murmur-gateway: multi-stage build, slim Python, non-root, tini as PID 1.
# The gateway writes no file: the ring (64 MiB arena plus 33 KiB of slots and headers,
# shm/ring.py) and the metric counters are memfds, not files in /dev/shm, so no --shm-size
# is needed; their pages count against the container's memory limit. The control socket is
# an abstract Unix socket, so a read-only root needs no tmpfs either.
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
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MUR_GATEWAY_BIND=0.0.0.0:52222 \
    MUR_GATEWAY_METRICS_BIND=0.0.0.0:9464
USER 10001:10001
EXPOSE 52222 9464
# Probes the port MUR_GATEWAY_BIND names (gateway/commands/healthcheck.py); keep it in docker format.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-m", "gateway.commands.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "mur-gateway"]
