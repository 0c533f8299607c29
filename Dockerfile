# Baton's image. The first stage installs Baton and its dependencies into a virtual
# environment; the second copies only that environment (no build tools, no pip cache) and
# runs as a user of its own. Built by compose.yaml (make compose-check builds and checks it).
FROM python:3.11-slim AS build
RUN python -m venv /opt/baton
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY server server
COPY queue queue
COPY agents agents
COPY demo demo
# With the vectors extra: every replica and worker embeds alike (docs/sessions.md#vectors).
RUN /opt/baton/bin/pip install --no-cache-dir '.[vectors]'

FROM python:3.11-slim
COPY --from=build /opt/baton /opt/baton
RUN useradd --create-home --uid 10001 baton && mkdir -p /run/baton /run/baton-signing \
    && chown baton /run/baton /run/baton-signing
ENV PATH=/opt/baton/bin:$PATH
USER baton
WORKDIR /home/baton
EXPOSE 8765
CMD ["baton", "serve", "--host", "0.0.0.0"]
