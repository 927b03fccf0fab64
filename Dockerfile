# The gateway as a container: one process, data on the /data volume, runs as a non-root user.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed uid/gid, so a host directory mounted on /data can be chowned to match.
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gateway \
    && mkdir /data \
    && chown gateway:gateway /data

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir . \
    && rm -rf /src

WORKDIR /data
USER 10001:10001
VOLUME /data
# Kafka, AMQP, admin HTTP API
EXPOSE 9092 5672 1883 8080

ENTRYPOINT ["gateway", "serve"]
CMD ["--data-dir", "/data", "--host", "0.0.0.0"]
