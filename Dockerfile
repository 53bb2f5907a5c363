# Quarry's image: the README's install (`make .venv/.installed`: Python 3.11, a virtual
# environment, `pip install -e '.[dev]'` from the package registry), nothing else.
# tests/deploy/test_compose.py checks that these steps are the README's.
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 quarry \
    && mkdir -p /opt/quarry /var/lib/quarry \
    && chown quarry:quarry /opt/quarry /var/lib/quarry
WORKDIR /opt/quarry
COPY --chown=quarry:quarry . .
USER quarry
RUN make .venv/.installed
ENV PATH=/opt/quarry/.venv/bin:$PATH
# /var/lib/quarry holds only a container's runtime files (no VOLUME): the state is in
# Postgres and the object store (docs/deploy.md).
EXPOSE 8000
ENTRYPOINT ["quarry"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
