# The streamctl image: Python 3.11, a Java 17 runtime for Spark, the project, and the Spark
# Kafka connector jars resolved by Maven at build time (never copied into the repository).
# docker-compose.yml runs every project process from it: topic init, the jobs, the controller,
# the load generator, and the Spark workers (`spark-class ... Worker`, from the pyspark pin:
# executors must run the driver's Python and the project's modules).
#
# BASE_IMAGE: any Debian bookworm image with Python 3.11 and its venv module; the default is
# the official one. A base that already has Java 17 (and Maven, for the jars stage) skips
# apt: the container check (tests/containers) builds from a debootstrap root file system
# with no network to reach Debian from.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE} AS base
RUN command -v java >/dev/null \
 || { apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
      && rm -rf /var/lib/apt/lists/*; }
# One interpreter path for the drivers and the executors (Spark workers run this image too).
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /opt/streamctl
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY controller controller
COPY streaming_jobs streaming_jobs
COPY streamctl streamctl
# pip's own settings as build arguments (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX,
# PIP_TRUSTED_HOST): unset, pip uses PyPI; the container check points them at a local
# wheelhouse.
ARG PIP_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX PIP_TRUSTED_HOST
RUN pip install --no-cache-dir .

FROM base AS jars
RUN command -v mvn >/dev/null \
 || { apt-get update && apt-get install -y --no-install-recommends maven \
      && rm -rf /var/lib/apt/lists/*; }
# MAVEN_MIRROR_URL: unset, Maven uses its own defaults (Maven Central); the container check
# points it at a local copy of its Maven cache.
ARG MAVEN_MIRROR_URL
RUN if [ -n "$MAVEN_MIRROR_URL" ]; then mkdir -p ~/.m2 && printf '%s' \
      "<settings><mirrors><mirror><id>local</id><mirrorOf>*</mirrorOf>" \
      "<url>$MAVEN_MIRROR_URL</url><blocked>false</blocked></mirror></mirrors></settings>" \
      > ~/.m2/settings.xml; fi
ENV STREAMCTL_STATE_DIR=/opt/streamctl/state
RUN streamctl stack resolve \
 && mkdir -p /opt/jars \
 && python -c "from streamctl.stack.connector import spark_kafka_jars; import shutil; [shutil.copy(p, '/opt/jars') for p in spark_kafka_jars()]"

FROM base
COPY --from=jars /opt/jars /opt/jars
# No SPARK_LOCAL_IP: a worker would advertise that address to the master and its executors'
# drivers, and 0.0.0.0 reaches no one. Unset, Spark uses the container's address on the
# compose network; the jobs' drivers name theirs (STREAMCTL_SPARK_DRIVER_HOST).
ENV STREAMCTL_SPARK_JARS_DIR=/opt/jars \
    SPARK_WORKER_DIR=/var/lib/streamctl/spark-work \
    STREAMCTL_STATE_DIR=/var/lib/streamctl/state
# Every process runs as an unprivileged user. The directories it writes belong to it in the
# image, so a named volume mounted there starts out writable by it (Docker copies the
# directory's owner into a new volume).
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/streamctl streamctl \
 && mkdir -p /var/lib/streamctl/checkpoints /var/lib/streamctl/spark-work /var/lib/streamctl/state \
 && chown -R streamctl:streamctl /var/lib/streamctl
USER streamctl
# 9300 controller metrics, 9301 job metrics, 8081 Spark worker web UI and metrics.
EXPOSE 9300 9301 8081
CMD ["streamctl", "--help"]
