# The streamctl image: Python 3.11, a Java 17 runtime for Spark, the project, and the Spark
# Kafka connector jars resolved by Maven at build time (never copied into the repository).
# docker-compose.yml runs every project process from it: topic init, the jobs, the controller,
# the load generator, and the Spark workers (`spark-class ... Worker`, from the pyspark pin:
# executors must run the driver's Python and the project's modules).
FROM python:3.11.14-slim-bookworm AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/streamctl
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY controller controller
COPY streaming_jobs streaming_jobs
COPY stack stack
COPY streamctl streamctl
COPY security security
RUN pip install --no-cache-dir .

FROM base AS jars
RUN apt-get update && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
ENV STREAMCTL_STATE_DIR=/opt/streamctl/state
RUN streamctl stack resolve \
 && mkdir -p /opt/jars \
 && python -c "from stack.connector import spark_kafka_jars; import shutil; [shutil.copy(p, '/opt/jars') for p in spark_kafka_jars()]"

FROM base
COPY --from=jars /opt/jars /opt/jars
# No SPARK_LOCAL_IP: a worker would advertise that address to the master and its executors'
# drivers, and 0.0.0.0 reaches no one. Unset, Spark uses the container's address on the
# compose network; the jobs' drivers name theirs (STREAMCTL_SPARK_DRIVER_HOST).
ENV STREAMCTL_SPARK_JARS_DIR=/opt/jars
# 9300 controller metrics, 9301 job metrics, 8081 Spark worker web UI and metrics.
EXPOSE 9300 9301 8081
CMD ["streamctl", "--help"]
