# The workbench client image the Kubernetes manifests run (deploy/k8s: the client ranks' Job, and the Triton
# pod's init container, which copies triton_models/ out of it). Build from the checkout's root:
#   docker build -f docker/workbench.Dockerfile -t REGISTRY/workbench:TAG .
# .dockerignore keeps .env (the logins), .stack/ and .venv/ out of the image: logins come from Secrets.
FROM python:3.11-slim
WORKDIR /workbench
COPY . /workbench
RUN pip install --no-cache-dir ".[torch,bench]"
