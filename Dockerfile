FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server server
COPY queue queue
COPY agents agents
COPY demo demo
RUN pip install --no-cache-dir .
EXPOSE 8765
CMD ["baton", "serve", "--host", "0.0.0.0"]
