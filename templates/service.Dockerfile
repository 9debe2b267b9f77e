# The control API's image (pipeline/service, run by Cloud Run: terraform/service.tf): a slim
# Python with the crawler's package and its `service` extra, from pinned versions. No Beam SDK
# harness and no Flex Template launcher: the API imports Beam's Python library only (gs:// text
# is read through Beam's FileSystems), which pip installs like any other dependency.
#
# Build from the repository root (docs/deploy.md); BuildKit takes this build's context rules
# from templates/service.Dockerfile.dockerignore:
#   docker build -f templates/service.Dockerfile -t IMAGE .
# The Python version must be the one the code is tested with (tests/test_templates.py).

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, in their own layer: they change far less often than the code.
COPY templates/requirements.txt templates/service-requirements.txt /app/templates/
RUN pip install --no-cache-dir -r /app/templates/requirements.txt \
        -r /app/templates/service-requirements.txt

COPY pyproject.toml README.md /app/
COPY pipeline /app/pipeline
RUN pip install --no-cache-dir --no-deps --no-build-isolation /app

# The API needs no privilege: it listens on an unprivileged port and reads the mounted token
# file, which Cloud Run makes readable to any user of the container.
USER 65532:65532

# Cloud Run sends requests to $PORT (8080 unless told otherwise); pipeline.service.cloud
# listens there.
EXPOSE 8080
CMD ["python", "-m", "pipeline.service.cloud"]
